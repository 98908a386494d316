"""Where things live inside a sandbox, and which variables carry what (pure constants).

The Kubernetes pod, the local sandbox, agent-sandbox pods and the runner image all use
this one layout, so a profile or a managed-settings preset works the same everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ironflow._renamed import renamed_names
from ironflow.secrets import looks_like_claude_credential

__all__ = [
    "ALLOW_BYPASS_ENV",
    "CONVERSATIONS_MOUNT_PATH",
    "CREDENTIALS_ENV",
    "MANAGED_SETTINGS_DIR",
    "MANAGED_SETTINGS_FILE",
    "PROFILE_MOUNT_DIR",
    "PROMPT_KEY",
    "PROMPT_MOUNT_DIR",
    "PROXY_FORBIDDEN_ENV",
    "RESERVED_MOUNT_PATHS",
    "SANDBOX_HOME",
    "SANDBOX_PATH_DIRS",
    "SANDBOX_TMP",
    "SANDBOX_UID",
    "SERVICE_ACCOUNT_TOKEN_DIR",
    "mount_path_problem",
    "proxy_env",
    "withheld_from_proxied_sandbox",
]

#: uid, gid and fsGroup of the agent in every sandbox.
SANDBOX_UID: Final = 10001
SANDBOX_HOME: Final = "/home/claude"
SANDBOX_TMP: Final = "/tmp"
#: Where Claude Code keeps its conversations (transcripts, one directory per working directory).
CONVERSATIONS_MOUNT_PATH: Final = "/home/claude/.claude/projects"
#: Claude Code reads managed-settings.json here on Linux; mounted read-only.
MANAGED_SETTINGS_DIR: Final = "/etc/claude-code"
MANAGED_SETTINGS_FILE: Final = "managed-settings.json"
#: Each profile ConfigMap is mounted read-only at PROFILE_MOUNT_DIR/<index> and copied.
PROFILE_MOUNT_DIR: Final = "/etc/ironflow/claude-profile"
PROMPT_MOUNT_DIR: Final = "/mnt/ironflow-prompt"
PROMPT_KEY: Final = "prompt"

#: Full credentials JSON, written to ~/.claude/.credentials.json by the home setup.
CREDENTIALS_ENV: Final = "IRONFLOW_CLAUDE_CREDENTIALS"
#: Worker-side opt-in for --dangerously-skip-permissions; always blanked in the pod.
ALLOW_BYPASS_ENV: Final = "IRONFLOW_ALLOW_BYPASS"

#: With an auth proxy, the pod must receive none of these: the proxy injects the credential.
PROXY_FORBIDDEN_ENV: Final = (
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    CREDENTIALS_ENV,
)


def proxy_env(base_url: str, token: str) -> dict[str, str]:
    """The only Claude variables a proxied sandbox gets (§6.8): the proxy's URL and the opaque
    ``ifap_`` token (useless outside the proxy), and no non-essential traffic. Every backend
    writes them through here."""
    return {
        "ANTHROPIC_BASE_URL": base_url.rstrip("/"),
        "ANTHROPIC_AUTH_TOKEN": token,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def withheld_from_proxied_sandbox(name: str, value: str) -> bool:
    """Whether a variable must not reach a sandbox behind the auth proxy: a Claude credential
    variable, whatever its case (``anthropic_api_key`` too), or a value holding a Claude
    credential anywhere. The one rule every backend applies.

    >>> withheld_from_proxied_sandbox("anthropic_api_key", "x")
    True
    >>> withheld_from_proxied_sandbox("MY_VAR", "Bearer sk-ant-1")
    True
    >>> withheld_from_proxied_sandbox("GITLAB_TOKEN", "glpat-1")
    False
    """
    return name.upper() in PROXY_FORBIDDEN_ENV or looks_like_claude_credential(value)


#: The directories of the sandbox's ``PATH``: a mount over one replaces what runs as ``claude``.
SANDBOX_PATH_DIRS: Final = ("/usr/local/bin", "/usr/bin", "/bin")

#: Where Kubernetes puts a service-account token: a step's volume there would plant one.
SERVICE_ACCOUNT_TOKEN_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 - a path

#: Where a step's own mount may not go, on every backend: the sandbox's HOME and /tmp, the
#: operator's managed settings, the profile and prompt mounts, the sandbox's own /proc, /dev and
#: relay directory, the ``PATH`` and the service-account token directory. A mount at one of these,
#: anywhere beneath it (``/etc/claude-code/managed-settings.json`` with a ``sub_path`` would cover
#: the preset) or at a directory above it (``/etc`` would hide ``/etc/claude-code``) is refused.
RESERVED_MOUNT_PATHS: Final = (
    SANDBOX_HOME,
    SANDBOX_TMP,
    MANAGED_SETTINGS_DIR,
    PROFILE_MOUNT_DIR,
    PROMPT_MOUNT_DIR,
    "/proc",
    "/dev",
    "/run/ironflow",
    *SANDBOX_PATH_DIRS,
    SERVICE_ACCOUNT_TOKEN_DIR,
)


def mount_path_problem(kind: str, path: str) -> str | None:
    """Why a step's ``kind`` mount cannot go to ``path``, or None: absolute, no empty, ``.`` or
    ``..`` segment (another spelling of a reserved path), not ``/``, not at or under a reserved
    path, and not above one (the mount would hide it).

    >>> mount_path_problem("read-only volume", "/etc/claude-code/managed-settings.json")
    "read-only volume cannot be mounted at reserved path '/etc/claude-code/managed-settings.json'"
    >>> mount_path_problem("read-only volume", "/etc")
    "read-only volume cannot be mounted at '/etc': it would hide reserved path '/etc/claude-code'"
    >>> mount_path_problem("PVC volume", "/data/repos") is None
    True
    """
    if not path.startswith("/"):
        return f"{kind} mount_path must be absolute, got '{path}'"
    norm = path.rstrip("/")  # a trailing slash names the same directory
    if norm and any(seg in ("", ".", "..") for seg in norm[1:].split("/")):
        return f"{kind} mount_path must not contain empty, '.' or '..' segments, got '{path}'"
    if not norm or any(norm == r or norm.startswith(r + "/") for r in RESERVED_MOUNT_PATHS):
        return f"{kind} cannot be mounted at reserved path '{path}'"
    hidden = next((r for r in RESERVED_MOUNT_PATHS if r.startswith(norm + "/")), None)
    if hidden is not None:
        return f"{kind} cannot be mounted at '{path}': it would hide reserved path '{hidden}'"
    return None


# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    SESSIONS_MOUNT_PATH = CONVERSATIONS_MOUNT_PATH
else:
    __getattr__ = renamed_names(__name__)
