"""Where an ``ironflow sandbox serve`` is, and the token its clients send: from the arguments,
else ``$IRONFLOW_SANDBOX_SERVER`` and ``$IRONFLOW_SANDBOX_TOKEN``, else the token file the
server wrote (:func:`token_file`).

Apart from the sessions' client (:mod:`ironflow.sessions.remote`) so a one-shot call
(:mod:`ironflow.sessions.one_call`) finds its server without loading it. The token is a
header value only: never in a message or a repr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from ironflow import errors, settings_file
from ironflow.secrets import Secret

__all__ = ["SERVER_ENV", "TOKEN_ENV", "resolve_server", "resolve_token", "token_file"]

SERVER_ENV: Final = "IRONFLOW_SANDBOX_SERVER"
TOKEN_ENV: Final = "IRONFLOW_SANDBOX_TOKEN"  # noqa: S105 - a variable name
_NO_SERVER: Final = (
    "no sandbox server: local sessions live in the process that serves them; start `ironflow sandbox serve` "
    f"and pass --server URL or set {SERVER_ENV}"
)


def token_file() -> Path:
    """Where ``ironflow sandbox serve`` writes the token it made: the per-user runtime dir
    (``$XDG_RUNTIME_DIR``, private and cleared at logout), else ``~/.cache/ironflow``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = Path(runtime) / "ironflow" if runtime and os.path.isdir(runtime) else Path.home() / ".cache" / "ironflow"
    return base / "sandbox-token"


def resolve_server(server: str | None) -> str:
    """``server``, else ``$IRONFLOW_SANDBOX_SERVER``: an ``http(s)://host:port`` URL.

    Raises:
        ConfigError: none is given, or it is not such a URL.
    """
    url = (server or os.environ.get(SERVER_ENV, "")).strip()
    if not url:
        raise errors.ConfigError(_NO_SERVER)
    settings_file.http_url(url, what="sandbox server")
    return url.rstrip("/")


def resolve_token(token: Secret | str | None = None) -> Secret:
    """``token``, else ``$IRONFLOW_SANDBOX_TOKEN``, else the server's token file.

    Raises:
        ConfigError: none of them holds a token.
    """
    if token:
        return token if isinstance(token, Secret) else Secret(token)
    if value := os.environ.get(TOKEN_ENV, "").strip():
        return Secret(value)
    path = token_file()
    try:
        value = path.read_text().strip()
    except OSError:
        value = ""
    if not value:
        raise errors.ConfigError(
            f"no sandbox server token: set {TOKEN_ENV}, or run `ironflow sandbox serve` (it writes {path})"
        )
    return Secret(value)
