"""An agent step as a value: what to ask, how to run it, what came back (pure).

``AgentConfig`` is frozen: every builder returns a new config, so a config shared
between steps or retries never changes under anyone's feet. Values that can never work
raise :class:`~ironflow.errors.ConfigError` at the call that received them; settings
that depend on the provider (a preset name, a reserved mount path) are checked by the
provider when the step is invoked.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Protocol

from ironflow import errors, labels, settings_file, step_checks, step_timeouts
from ironflow._renamed import renamed_names, warn_renamed
from ironflow.secrets import Secret
from ironflow.step_checks import environment_id_valid, invalid_environment_id_message
from ironflow.step_sandbox import (
    OLD_READ_ONLY_VOLUME_KEY,
    READ_ONLY_VOLUME_KEYS,
    AgentInput,
    ConfigMapSource,
    HostPathSource,
    PodSettings,
    PvcSource,
    PvcVolume,
    ReadOnlyVolume,
    SecretEnvVar,
    read_only_volume_dict,
    read_only_volume_from,
)
from ironflow.workspaces import Workspace

__all__ = [
    "DEFAULT_MODEL",
    "AccountLease",
    "AgentConfig",
    "PermissionMode",
    "RateLimitRecorder",
    "StepScope",
    "environment_id_valid",
    "invalid_environment_id_message",
]

DEFAULT_MODEL: Final = "sonnet"


class PermissionMode(StrEnum):
    """How the CLI asks for permission; ``bypassPermissions`` needs IRONFLOW_ALLOW_BYPASS=1."""

    DEFAULT = "default"
    AUTO = "auto"
    DONT_ASK = "dontAsk"
    BYPASS_PERMISSIONS = "bypassPermissions"


# --- provider accounts -------------------------------------------------------------------


class RateLimitRecorder(Protocol):
    """Receives the rate-limit windows a step's output reported (see ``claude.rate_limits``)."""

    def record(self, windows: Iterable[Any]) -> None: ...


@dataclass(frozen=True)
class AccountLease:
    """A Provider Account leased to one step (the pool's ``acquire`` to its ``release``): the
    credential reaches only the auth proxy. Not a sandbox session (docs/architecture.md, "Words")."""

    account_id: str
    env_name: str
    value: Secret = field(repr=False)
    recorder: RateLimitRecorder | None = field(default=None, repr=False, compare=False)

    @property
    def credential_kind(self) -> str:
        return "api_key" if self.env_name == "ANTHROPIC_API_KEY" else "oauth_token"


# --- the step configuration --------------------------------------------------------------


def _frozen_map(value: Mapping[str, str] | None) -> Mapping[str, str]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class StepScope:
    """Which run a step belongs to: the run, the run's root (a sub-workflow's top run) and the
    step's name. It travels with the step; backends derive their labels from it where they make
    Kubernetes objects (:attr:`labels`), and nothing reads it back out of labels."""

    run_id: str
    step: str
    root_run_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("run_id", "step"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise errors.ConfigError(f"step scope {name} must be a non-empty string, got {value!r}")

    @property
    def labels(self) -> dict[str, str]:
        """The §2 run, step and root-run labels (sanitised)."""
        return labels.scope_labels(run_id=self.run_id, step=self.step, root_run_id=self.root_run_id)


@dataclass(frozen=True)
class AgentConfig:
    """One agent step: the prompt, CLI options and the pod settings it brings.

    >>> cfg = AgentConfig("List the repos").read_only_pvc("repos", "/data/repos")
    >>> cfg.model, cfg.pod.read_only_volumes[0].mount_path
    ('sonnet', '/data/repos')
    """

    prompt: str
    system_prompt: str | None = None
    append_system_prompt: str | None = None
    model: str = DEFAULT_MODEL
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    tool_profile: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    working_dir: str | None = None
    mcp_config: str | None = None
    strict_mcp_config: bool = False
    bare: bool = False
    permission_mode: PermissionMode = PermissionMode.DEFAULT
    json_schema: Mapping[str, Any] | None = None
    resume_session_id: str | None = None
    session_id: str | None = None
    #: ``claude --continue``: carry on the latest conversation of the working directory, which a
    #: backend keeps only with a conversations volume (``conversations_dir``, ``sessions_claim``).
    continue_session: bool = False
    #: Mount this persistent environment (an earlier ``AgentResult.environment_id``) instead of a new one.
    resume_environment_id: str | None = None
    verbose: bool = False
    pod_labels: Mapping[str, str] = field(default_factory=lambda: _frozen_map(None))
    #: The run and step this step belongs to (set by the engine, or by :meth:`scoped`).
    scope: StepScope | None = None
    pod: PodSettings = field(default_factory=PodSettings)
    inputs: tuple[AgentInput, ...] = ()
    trace_context: str | None = None
    #: What the step works on at /workspace: a host directory's private copy, a git clone, a PVC.
    workspace: Workspace | None = None
    account: AccountLease | None = field(default=None, repr=False, compare=False)
    #: Text the caller marked secret (``Prompt.untrusted(label, Secret(text))``): the engine redacts
    #: it from the transcripts it stores; never serialised, like the account lease.
    secret_values: tuple[Secret, ...] = field(default=(), repr=False, compare=False)
    #: Seconds this step may run, whatever the provider allows: the smaller bound holds
    #: (:func:`ironflow.step_timeouts.effective`). None: the provider's alone.
    timeout: float | None = None
    #: What this step does in its workflow (``reviewer``, ``fixer``): the engine tracks cost per role
    #: and a worker may cap it per calendar period (:mod:`ironflow.engine.budgets`). A label value.
    role: str | None = None

    def __post_init__(self) -> None:
        problem = step_checks.scalar_type_problem(self)
        if problem is not None:
            raise errors.ConfigError(problem)
        for name in ("prompt", "system_prompt", "append_system_prompt"):
            text = getattr(self, name)
            if text is not None and not step_checks.is_utf8(text):
                raise errors.ConfigError(f"the {name.replace('_', ' ')} is not valid UTF-8 text; pass it as UTF-8")
        set_ = object.__setattr__
        set_(self, "allowed_tools", tuple(self.allowed_tools))
        set_(self, "disallowed_tools", tuple(self.disallowed_tools))
        set_(self, "inputs", tuple(self.inputs))
        set_(self, "secret_values", tuple(v if isinstance(v, Secret) else Secret(v) for v in self.secret_values))
        set_(self, "pod_labels", _frozen_map(self.pod_labels))
        for key, value in self.pod_labels.items():
            problem = labels.label_key_problem(key) or labels.label_value_problem(key, value)
            if problem is not None:
                raise errors.ConfigError(f"pod_labels: {problem}")
        set_(self, "permission_mode", PermissionMode(self.permission_mode))
        if self.json_schema is not None:
            schema = json.loads(self.json_schema) if isinstance(self.json_schema, str) else self.json_schema
            if not isinstance(schema, Mapping):
                raise errors.ConfigError("json_schema must be a JSON object")
            set_(self, "json_schema", MappingProxyType(dict(schema)))
        if not self.prompt:
            raise errors.ConfigError("prompt must not be empty")
        if self.max_turns is not None and self.max_turns <= 0:
            raise errors.ConfigError("max_turns must be greater than 0")
        if self.max_budget_usd is not None and not (math.isfinite(self.max_budget_usd) and self.max_budget_usd > 0):
            raise errors.ConfigError("budget must be a positive finite number")
        set_(self, "timeout", step_timeouts.step_seconds(self.timeout))
        conversation_problem = step_checks.conversation_problem(self) or step_checks.role_problem(self.role)
        if conversation_problem is not None:
            raise errors.ConfigError(conversation_problem)
        if self.resume_environment_id is not None and not environment_id_valid(self.resume_environment_id):
            raise errors.ConfigError(invalid_environment_id_message(self.resume_environment_id))
        if self.json_schema is not None and self.allowed_tools:
            raise errors.ConfigError(
                "json_schema and allowed_tools cannot be combined: a structured-output step runs no tools"
            )

    # -- generic --

    def replace(self, **changes: Any) -> AgentConfig:
        """A copy with ``changes`` applied and validated again."""
        return dataclasses.replace(self, **changes)

    def _pod(self, **changes: Any) -> AgentConfig:
        return dataclasses.replace(self, pod=dataclasses.replace(self.pod, **changes))

    # -- pod settings --

    def env_from_secret(self, name: str, secret: str, key: str) -> AgentConfig:
        """Read ``name`` from ``secret``/``key``; the same name again replaces it in place."""
        entry = SecretEnvVar(name, secret, key)
        current = list(self.pod.secret_env)
        for i, existing in enumerate(current):
            if existing.name == name:
                current[i] = entry
                break
        else:
            current.append(entry)
        return self._pod(secret_env=tuple(current))

    def service_account(self, name: str) -> AgentConfig:
        return self._pod(service_account=name)

    def runtime_class(self, name: str) -> AgentConfig:
        """Set the RuntimeClass (e.g. ``gvisor``); a blank name fails the invocation."""
        return self._pod(runtime_class=name)

    def read_only_volume(self, volume: ReadOnlyVolume) -> AgentConfig:
        return self._pod(read_only_volumes=(*self.pod.read_only_volumes, volume))

    def read_only_pvc(self, claim_name: str, mount_path: str) -> AgentConfig:
        return self.read_only_volume(ReadOnlyVolume(PvcSource(claim_name), mount_path))

    def read_only_host_path(self, path: str, mount_path: str) -> AgentConfig:
        return self.read_only_volume(ReadOnlyVolume(HostPathSource(path), mount_path))

    def read_only_config_map(self, name: str, mount_path: str) -> AgentConfig:
        return self.read_only_volume(ReadOnlyVolume(ConfigMapSource(name), mount_path))

    def pvc_volume(
        self, claim_name: str, mount_path: str, *, sub_path: str | None = None, read_only: bool = False
    ) -> AgentConfig:
        volume = PvcVolume(claim_name, mount_path, sub_path, read_only)
        problem = volume.problem()
        if problem is not None:
            raise errors.ConfigError(f"invalid pvc_volume: {problem}")
        return self._pod(pvc_volumes=(*self.pod.pvc_volumes, volume))

    def without_provider_volumes(self) -> AgentConfig:
        """Drop the provider's hostPath and PVC volumes for this step."""
        return self._pod(without_provider_volumes=True)

    def managed_settings(self, preset: str) -> AgentConfig:
        """Use a managed-settings preset registered on the provider (unknown: the step fails)."""
        return self._pod(managed_settings=preset)

    def egress_profile(self, name: str) -> AgentConfig:
        """Label the pod ``ironflow.io/egress-profile=name`` for the network policies."""
        return self.pod_label(labels.LABEL_EGRESS_PROFILE, name)

    def pod_label(self, key: str, value: str) -> AgentConfig:
        """Add a pod label. A reserved key is refused when the step is invoked."""
        return dataclasses.replace(self, pod_labels={**self.pod_labels, key: value})

    def with_pod_labels(self, pod_labels: Mapping[str, str]) -> AgentConfig:
        """Replace every pod label."""
        return dataclasses.replace(self, pod_labels=pod_labels)

    def scoped(self, run_id: str, step: str, *, root_run_id: str | None = None) -> AgentConfig:
        """Place the step in a run, as the engine does (for use outside the engine)."""
        return dataclasses.replace(self, scope=StepScope(run_id, step, root_run_id))

    def input(self, url: str, mount_path: str) -> AgentConfig:
        """Fetch ``url`` to ``mount_path`` before the agent starts (checked at invocation)."""
        return dataclasses.replace(self, inputs=(*self.inputs, AgentInput(url, mount_path)))

    def resume_environment(self, environment_id: str) -> AgentConfig:
        """Mount the persistent environment an earlier step returned (its ``environment_id``);
        the provider needs an environment volume. An id outside ``[a-z0-9-]{1,253}`` raises ConfigError."""
        return dataclasses.replace(self, resume_environment_id=environment_id)

    def with_timeout(self, seconds: float) -> AgentConfig:
        """Bound this step to ``seconds``, independently of the provider (the smaller bound holds)."""
        return dataclasses.replace(self, timeout=seconds)

    def account_lease(self, lease: AccountLease) -> AgentConfig:
        """Run the step on the leased Provider Account (as the engine does)."""
        return dataclasses.replace(self, account=lease)

    def account_session(self, session: AccountLease) -> AgentConfig:
        """The old name of :meth:`account_lease`, kept for one release (warns)."""
        warn_renamed("ironflow.steps.AgentConfig", "account_session", "account_lease")
        return self.account_lease(session)

    # -- serialisation --

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict; the account lease (a credential) and secret values are never included."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in _NOT_SERIALISED:
                continue
            value = getattr(self, f.name)
            if value == f.default or (f.default_factory is not dataclasses.MISSING and value == f.default_factory()):
                continue
            out[f.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentConfig:
        """Build from :meth:`to_dict` output or a step YAML; an unknown key is refused by name."""
        if not isinstance(data, Mapping):
            raise errors.ConfigError(
                f"step settings must be a mapping of setting names, got {step_checks.SHORT.repr(data)}"
            )
        known = {f.name for f in dataclasses.fields(cls)} - _NOT_SERIALISED
        unknown = sorted(set(data) - known)
        if unknown:
            raise errors.ConfigError(f"unknown step setting '{unknown[0]}'; known: {', '.join(sorted(known))}")
        if "prompt" not in data:
            raise errors.ConfigError("step setting 'prompt' is required")
        kwargs = dict(data)
        top = settings_file.Section(data, known=known, path="")
        if top.has("pod"):
            kwargs["pod"] = _pod_from_dict(top.section("pod", _POD_KEYS))
        if top.has("inputs"):
            kwargs["inputs"] = tuple(
                AgentInput(i.text("url"), i.text("mount_path")) for i in top.items("inputs", ("url", "mount_path"))
            )
        if top.has("scope"):
            scope = top.section("scope", ("run_id", "step", "root_run_id"))
            kwargs["scope"] = StepScope(scope.text("run_id"), scope.text("step"), scope.optional_text("root_run_id"))
        for name in ("allowed_tools", "disallowed_tools"):
            if top.has(name):
                kwargs[name] = tuple(top.str_list(name))
        if top.has("pod_labels"):
            kwargs["pod_labels"] = top.str_map("pod_labels")
        if top.has("workspace"):
            ws = top.section(
                "workspace",
                ("source", "apply", "max_file_bytes", "max_total_bytes", "ref", "push_branch", "keep_on_retry"),
            )
            extra: dict[str, Any] = {k: ws.integer(k) for k in ("max_file_bytes", "max_total_bytes") if ws.has(k)}
            extra.update({k: ws.text(k) for k in ("ref", "push_branch") if ws.has(k)})
            if ws.has("keep_on_retry"):
                extra["keep_on_retry"] = ws.flag("keep_on_retry")
            kwargs["workspace"] = Workspace(ws.text("source"), ws.has("apply") and ws.flag("apply"), **extra)
        try:
            return cls(**kwargs)
        except TypeError as exc:  # a setting of the wrong shape the field checks do not name
            raise errors.ConfigError(f"invalid step settings: {exc}") from None


#: Fields that hold credentials or secret text: never in a dict, so never in a stored step or history.
_NOT_SERIALISED: Final = frozenset({"account", "secret_values"})


def _plain(value: Any) -> Any:
    """JSON-able form; fields at their default are left out, so stored configs stay short."""
    if isinstance(value, StrEnum):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.default is dataclasses.MISSING or getattr(value, f.name) != f.default
        }
        if isinstance(value, ReadOnlyVolume):
            return read_only_volume_dict(value)  # the spelling step and provider files share
        return out
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


_POD_KEYS: Final = (
    "secret_env",
    "service_account",
    "read_only_volumes",
    "managed_settings",
    "runtime_class",
    "pvc_volumes",
    "without_provider_volumes",
)


def _pod_from_dict(pod: settings_file.Section) -> PodSettings:
    """A step file's ``pod`` section (the form :meth:`AgentConfig.to_dict` writes)."""
    return PodSettings(
        secret_env=tuple(
            SecretEnvVar(e.text("name"), e.text("secret"), e.text("key"))
            for e in (pod.items("secret_env", ("name", "secret", "key")) if pod.has("secret_env") else ())
        ),
        service_account=pod.optional_text("service_account"),
        read_only_volumes=tuple(
            read_only_volume_from(v)
            for v in (pod.items("read_only_volumes", _RO_KEYS) if pod.has("read_only_volumes") else ())
        ),
        managed_settings=pod.optional_text("managed_settings"),
        runtime_class=pod.optional_text("runtime_class"),
        pvc_volumes=tuple(
            PvcVolume(
                v.text("claim_name"),
                v.text("mount_path"),
                v.optional_text("sub_path"),
                v.flag("read_only") if v.has("read_only") else False,
            )
            for v in (pod.items("pvc_volumes", _PVC_KEYS) if pod.has("pvc_volumes") else ())
        ),
        without_provider_volumes=pod.flag("without_provider_volumes") if pod.has("without_provider_volumes") else False,
    )


#: ``source`` is the old spelling of a read-only volume: read for one release, with a warning.
_RO_KEYS: Final = (*READ_ONLY_VOLUME_KEYS, OLD_READ_ONLY_VOLUME_KEY)
_PVC_KEYS: Final = ("claim_name", "mount_path", "sub_path", "read_only")


# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    AccountSession = AccountLease
else:
    __getattr__ = renamed_names(__name__)
