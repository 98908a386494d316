"""Which store a URL names: ``sqlite:///path`` or a plain path (a SQLite file), or
``postgresql://…``; with none, ``$IRONFLOW_STORE``, else a SQLite file in the user's data dir (pure
but for the environment). Apart from :mod:`ironflow.engine.store` so a command that reads a SQLite
file without an event loop (:mod:`ironflow.engine.sqlite_reads`) finds it the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from ironflow import errors

__all__ = ["STORE_ENV", "default_store_url", "sqlite_path"]

#: Environment variable naming the store when ``--store`` is not given.
STORE_ENV: Final = "IRONFLOW_STORE"


def default_store_url() -> str:
    """``$IRONFLOW_STORE``, else a SQLite file under the user's data directory."""
    env = os.environ.get(STORE_ENV)
    if env:
        return env
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{base / 'ironflow' / 'engine.db'}"


def sqlite_path(url: str) -> str | None:
    """The SQLite file ``url`` names; None for a PostgreSQL URL.

    Raises:
        ConfigError: a ``sqlite://`` URL with no file, or another scheme.
    """
    if url.startswith(("postgres://", "postgresql://")):
        return None
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")  # sqlite:///abs/file → /abs/file
        if not path or path == "/":
            raise errors.ConfigError(f"store URL {url!r} names no file; use sqlite:///path/to/engine.db")
        return path
    if "://" in url:
        raise errors.ConfigError(
            f"unknown store URL scheme in {url.split('://')[0]!r}; use sqlite:///path or postgresql://…"
        )
    return url
