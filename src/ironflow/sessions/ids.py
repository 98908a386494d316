"""The ids of sessions and snapshots, their checks, and the errors of an id that names nothing (pure).

Apart from :mod:`ironflow.sessions.values` (which re-exports them) so a one-shot call
(``ironflow sandbox exec``) checks an id without loading a session's other values.
"""

from __future__ import annotations

import re
from typing import Final

from ironflow import errors

__all__ = ["SESSION_ID", "SNAPSHOT_ID", "SessionNotFound", "SnapshotNotFound", "check_session_id", "check_snapshot_id"]

#: A session id: ``sbx-`` and 16 lowercase hex digits (a DNS label, so it can name a claim too).
SESSION_ID: Final = re.compile(r"^sbx-[0-9a-f]{16}$")
#: A snapshot id: ``snap-`` and 16 lowercase hex digits.
SNAPSHOT_ID: Final = re.compile(r"^snap-[0-9a-f]{16}$")


class SessionNotFound(errors.UsageError):
    """No open session has this id (it was closed, expired, or never existed)."""


class SnapshotNotFound(errors.UsageError):
    """No snapshot in the store has this id (it was removed, or never existed)."""


def check_session_id(value: str) -> str:
    """``value`` when it is a session id.

    Raises:
        ConfigError: naming the expected form.
    """
    if not SESSION_ID.match(value):
        raise errors.ConfigError(f"invalid sandbox id '{errors.truncate(value, 80)}': expected sbx-<16 hex digits>")
    return value


def check_snapshot_id(value: str) -> str:
    """``value`` when it is a snapshot id.

    Raises:
        ConfigError: naming the expected form.
    """
    if not SNAPSHOT_ID.match(value):
        raise errors.ConfigError(f"invalid snapshot id '{errors.truncate(value, 80)}': expected snap-<16 hex digits>")
    return value
