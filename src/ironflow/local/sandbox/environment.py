"""Step settings into local-sandbox decisions (pure): what is ignored, the environment.

What a Kubernetes-only setting becomes locally is decided here, once: applied
(``read_only_host_path`` → a read-only bind), or accepted and named in
``AgentResult.ignored_settings``. The sandbox environment is built from nothing: the
worker's own variables never reach a step; credential variables, names that steer the dynamic
loader or libc at start-up, and names or values a process environment cannot carry are refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Final, Literal

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.local.sandbox import bwrap
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow.egress import EgressPolicy
    from ironflow.steps import AgentConfig

__all__ = [
    "AGENT_KEEP_BYTES",
    "EGRESS_PORT",
    "PROXY_PORT",
    "Isolation",
    "LocalProfile",
    "ProxyCredential",
    "egress_env",
    "env_problem",
    "hidden_from_sandbox",
    "ignored_settings",
    "managed_settings_for",
    "proxy_env",
    "sandbox_env",
    "serves_egress",
    "tool_root",
]

Isolation = Literal["bwrap", "gvisor", "docker"]
#: Bytes of an agent step's start and end kept for its parse: the stream-json result line is the
#: last, and a model's answer is well under this (a million tokens is about 4 MiB).
AGENT_KEEP_BYTES: Final = 8 << 20
#: Where the proxy relay listens inside the sandbox's own network namespace.
PROXY_PORT: Final = 18080
#: The egress proxy's relay in the sandbox (``HTTPS_PROXY``), when the step has an egress policy.
EGRESS_PORT: Final = 18081
_SANDBOX_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
#: glibc's start-up variables (its ``unsecvars.h``, the list it drops for setuid programs) besides
#: ``LD_*``: each makes every process that starts load code or read files they name (``GCONV_PATH``
#: a module, ``GLIBC_TUNABLES`` the loader's own parser). ``TMPDIR`` is on glibc's list but only
#: names a directory, and the sandbox sets it itself; it stays allowed.
_LOADER_ENV: Final = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
    }
)
#: More variables than any step needs; bubblewrap reads at most 9,000 arguments, three a variable.
MAX_ENV_VARIABLES: Final = 1024


@dataclass(frozen=True)
class LocalProfile:
    """A host directory copied into ``~/.claude/<subdir>``, as a profile ConfigMap is in the pod."""

    path: str
    subdir: str = ""


@dataclass(frozen=True)
class ProxyCredential:
    """The credential only the in-process auth proxy sees, and where it relays to."""

    value: Secret = dataclasses.field(repr=False)
    kind: Literal["api_key", "oauth_token"] = "api_key"
    upstream: str = "https://api.anthropic.com"


def ignored_settings(
    config: AgentConfig, *, isolation: Isolation = "bwrap", presets: Collection[str] = ()
) -> tuple[str, ...]:
    """The step's settings a local sandbox accepts but cannot apply, named for the report.

    A managed-settings preset is ignored only when the provider has no local presets at
    all (on Kubernetes presets name ConfigMaps); otherwise :func:`managed_settings_for`
    applies it or refuses it.
    """
    from ironflow.step_sandbox import HostPathSource  # an agent step's values

    pod = config.pod
    out: list[str] = []
    if pod.managed_settings is not None and not presets:
        out.append(f"managed_settings preset '{pod.managed_settings}' (no local presets on the provider)")
    if pod.service_account is not None:
        out.append("service_account")
    if pod.runtime_class is not None:
        out.append(f"runtime_class (local isolation is {isolation})")
    if pod.secret_env:
        out.append("secret_env (" + ", ".join(e.name for e in pod.secret_env) + ")")
    for vol in pod.read_only_volumes:
        if not isinstance(vol.source, HostPathSource):
            out.append(f"read_only_volume at {vol.mount_path} ({type(vol.source).__name__})")
    out.extend(f"pvc_volume {v.claim_name} at {v.mount_path}" for v in pod.pvc_volumes)
    if pod.without_provider_volumes:
        out.append("without_provider_volumes")
    out.extend(f"input {i.mount_path}" for i in config.inputs)
    if config.resume_environment_id is not None:
        out.append(f"resume_environment {config.resume_environment_id} (no persistent environments locally)")
    if labels.LABEL_EGRESS_PROFILE in config.pod_labels:
        out.append(f"egress_profile {config.pod_labels[labels.LABEL_EGRESS_PROFILE]} (no network but the proxy)")
    return tuple(out)


def sandbox_env(
    extra: Mapping[str, str] | None = None, *, proxy_token: str | None = None, proxy_port: int = PROXY_PORT
) -> dict[str, str]:
    """The whole environment of the sandbox: nothing inherited from the worker.

    Raises:
        StepConfigError: ``extra`` names a credential variable or holds a ``sk-ant`` value, or has
            a variable :func:`env_problem` refuses, or more than :data:`MAX_ENV_VARIABLES`.
    """
    env = {"PATH": _SANDBOX_PATH, "HOME": layout.SANDBOX_HOME, "TMPDIR": layout.SANDBOX_TMP, "LANG": "C.UTF-8"}
    extra = extra or {}
    if len(extra) > MAX_ENV_VARIABLES:
        raise errors.StepConfigError(f"the sandbox env has {len(extra)} variables; at most {MAX_ENV_VARIABLES}")
    for name, value in extra.items():
        if problem := env_problem(name, value):
            raise errors.StepConfigError(problem)
        if layout.withheld_from_proxied_sandbox(name, value):
            raise errors.StepConfigError(
                f"auth_proxy is set: the pod must not receive {name}; the proxy injects the credential"
            )
        env[name] = value
    if proxy_token is not None:
        env.update(proxy_env(proxy_token, proxy_port))
    return env


def env_problem(name: str, value: str = "") -> str | None:
    """Why the sandbox may not get variable ``name`` (set to ``value``), or None; the value is never
    quoted. Refused: a name no process environment carries (``[A-Za-z_][A-Za-z0-9_]*``), a NUL in the
    value, and the names that steer the dynamic loader or libc as any process starts (``LD_*``,
    ``GLIBC_TUNABLES``, glibc's unsecure list): they once reached the sandbox runtime's host process,
    which loaded an ``LD_PRELOAD`` library in the host's network namespace. A step's own processes
    may still set them for themselves, inside.

    >>> env_problem("LD_PRELOAD")
    "env LD_PRELOAD is refused: LD_*, GLIBC_TUNABLES and glibc's start-up variables steer the loader or libc"
    >>> env_problem("TMPDIR") is None
    True
    """
    from ironflow.step_sandbox import is_env_name  # the one rule; a call without variables loads none

    if not is_env_name(name):
        return f"invalid env name '{errors.truncate(name, 40)}': use [A-Za-z_][A-Za-z0-9_]*"
    if "\0" in value:
        return f"env {name} holds a NUL byte, which no process environment can carry"
    if name.startswith("LD_") or name in _LOADER_ENV:
        return f"env {name} is refused: LD_*, GLIBC_TUNABLES and glibc's start-up variables steer the loader or libc"
    return None


def proxy_env(proxy_token: str, proxy_port: int = PROXY_PORT) -> dict[str, str]:
    """The variables that point the sandbox at the auth proxy's relay with its opaque token."""
    return {**layout.proxy_env(f"http://127.0.0.1:{proxy_port}", proxy_token), "DISABLE_AUTOUPDATER": "1"}


def serves_egress(policy: EgressPolicy | None) -> bool:
    """Whether a step's policy opens anything: an egress proxy to serve and its variables
    (:func:`egress_env`) to give; with no allow rule there is neither."""
    return policy is not None and bool(policy.allow)


def egress_env(proxy_token: str, egress_port: int = EGRESS_PORT) -> dict[str, str]:
    """The variables that send curl, pip, npm and git through the egress proxy's relay, the token as
    the proxy URL's password. Loopback bypasses it: the model relay is there, and nothing else is."""
    url = f"http://ironflow:{proxy_token}@127.0.0.1:{egress_port}"
    bypass = "127.0.0.1,localhost"
    return {
        **{name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")},
        "NO_PROXY": bypass,
        "no_proxy": bypass,
    }


def managed_settings_for(
    config: AgentConfig, default: Mapping[str, Any] | None, presets: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The managed-settings document of a step: its preset, else the provider's default.

    Raises:
        StepConfigError: the step names a preset the provider's (non-empty) presets lack.
    """
    name = config.pod.managed_settings
    if name is None or not presets:
        return default
    if name not in presets:
        known = ", ".join(sorted(presets))
        raise errors.StepConfigError(f"unknown managed settings preset '{name}', known presets: [{known}]")
    return presets[name]


def hidden_from_sandbox(path: str) -> bool:
    """Whether ``path`` lies under a host directory the bubblewrap sandbox does not show."""
    parts = PurePosixPath(path).parts
    return len(parts) > 1 and parts[1] in bwrap.HIDDEN_ROOT_ENTRIES - {"etc", "proc", "dev"}


def tool_root(path: str) -> str:
    """The directory to expose for a tool: its package dir (``…/claude-code``) or prefix."""
    real = PurePosixPath(path)
    if real.parent.name == "bin":
        return str(real.parent.parent)
    return str(real.parent)
