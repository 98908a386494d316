"""What reaches a sandbox after its pod exists, over exec stdin, and the shell that takes it (pure).

The proxy token never enters a template, a claim, a Sandbox or a ConfigMap: it is written by an
exec whose stdin carries it (:func:`write_file_command`) into ``$HOME/.ironflow`` (the pod's
emptyDir HOME, mode 0600), and the agent's shell moves it into the proxy env and removes the
file (:func:`token_prefix`). A step whose pod takes egress gets its egress-only token the same
way (:data:`EGRESS_TOKEN_FILE`, :func:`egress_prefix`): the template carries the egress proxy's
address, the exec's shell adds the token as its password. A pattern whose container runs the agent itself waits for that
file first (:func:`token_wait_prefix`): the token arrives once the pod runs, from
``AgentSandboxProvider.deliver_token`` (``ironflow sandbox deliver-token``). Everything here is a string of
its inputs.
"""

from __future__ import annotations

from typing import Final

from ironflow.claude import command, layout
from ironflow.k8s import step_objects
from ironflow.k8s.settings import ProviderSettings
from ironflow.secrets import Secret

__all__ = [
    "DEFAULT_TOKEN_WAIT_S",
    "EGRESS_TOKEN_FILE",
    "PROXY_TOKEN_FILE",
    "TOKEN_DIR",
    "TOKEN_WAIT_EXIT",
    "egress_prefix",
    "token_file",
    "token_prefix",
    "token_wait_prefix",
    "write_file_command",
]

#: Under HOME (an emptyDir of the hardened pod): where the token and a large prompt land.
TOKEN_DIR: Final = ".ironflow"  # noqa: S105 - a directory name
PROXY_TOKEN_FILE: Final = "proxy-token"  # noqa: S105 - a file name
#: The step's egress-only token, the password of the pod's proxy variables.
EGRESS_TOKEN_FILE: Final = "egress-token"  # noqa: S105 - a file name
#: How long a pattern's agent waits for its token before it gives up.
DEFAULT_TOKEN_WAIT_S: Final = 300
#: The agent container's exit code when no token arrived (EX_CONFIG).
TOKEN_WAIT_EXIT: Final = 78
#: Stands in for the token when the proxy env is asked which variable carries it.
_TOKEN_MARK: Final = "\0token"  # noqa: S105 - a marker, never a token
#: Stands in for the egress token inside a proxy URL (letters only: URL quoting leaves it whole).
_EGRESS_MARK: Final = "IRONFLOWEGRESSTOKEN"


def token_file(name: str = PROXY_TOKEN_FILE) -> str:
    """The shell word of ``$HOME/.ironflow/<name>``."""
    return f'"$HOME/{TOKEN_DIR}/{name}"'


def write_file_command(name: str, size: int) -> tuple[str, ...]:
    """Read exactly ``size`` bytes of stdin into ``$HOME/.ironflow/<name>`` (0600); v4 exec has no EOF.

    The file appears whole or not at all (written beside, then renamed), so a waiting shell
    never reads half a token.
    """
    target = token_file(name)
    script = f'umask 077 && mkdir -p "$HOME/{TOKEN_DIR}" && head -c {size} > {target}.part && mv {target}.part {target}'
    return ("sh", "-c", script)


def token_prefix(proxy_url: str, file: str | None = None) -> str:
    """Shell that moves the token file into the proxy env (:func:`~ironflow.claude.layout.proxy_env`)
    and removes the file, so the token lives only in the agent's environment."""
    path = file or token_file()
    env = layout.proxy_env(proxy_url, _TOKEN_MARK)
    (token_var,) = (k for k, v in env.items() if v == _TOKEN_MARK)
    others = " ".join(f"{k}={command.shell_quote(v)}" for k, v in env.items() if k != token_var)
    return f'{token_var}="$(cat {path})" && rm -f {path} && export {token_var} {others} && '


def egress_prefix(settings: ProviderSettings) -> str:
    """Shell that moves the egress token file into the proxy variables' password
    (:func:`~ironflow.k8s.step_objects.egress_env`, the same the pod step's env holds) and removes
    the file; empty when the pod's policy opens nothing."""
    env = step_objects.egress_env(settings, Secret(_EGRESS_MARK))
    if not env:
        return ""
    path = token_file(EGRESS_TOKEN_FILE)

    def word(value: str) -> str:  # the token expanded in double quotes, the rest quoted as it is
        return '"$_egress"'.join(command.shell_quote(part) if part else "" for part in value.split(_EGRESS_MARK))

    exports = " ".join(f"{k}={word(v)}" for k, v in env.items())
    return f'_egress="$(cat {path})" && rm -f {path} && export {exports} && unset _egress && '


def token_wait_prefix(proxy_url: str, *, wait_s: int = DEFAULT_TOKEN_WAIT_S) -> str:
    """Shell that waits up to ``wait_s`` seconds for the delivered token file, then :func:`token_prefix`.

    >>> "exit 78" in token_wait_prefix("http://proxy:8080", wait_s=5)
    True
    """
    path = token_file()
    give_up = (
        f"echo 'ironflow: no proxy token reached this sandbox within {wait_s}s: deliver it with "
        f"ironflow sandbox deliver-token' >&2; exit {TOKEN_WAIT_EXIT}"
    )
    # A poll inside the pod: exec gives no way to signal the agent's own process.
    wait = f"n=0; until [ -f {path} ]; do n=$((n+1)); if [ $n -gt {wait_s} ]; then {give_up}; fi; sleep 1; done; "
    return wait + token_prefix(proxy_url, path)
