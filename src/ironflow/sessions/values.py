"""Sandbox sessions as values, the same on every backend (pure).

A session is a sandbox kept open: commands run in it one after another, files move in and
out. What a backend hands back is described here once: the session (:class:`SessionInfo`),
a command's result (:class:`CommandResult`), the events of a streamed command
(:class:`Output`, :class:`Exit`) and a directory entry (:class:`FileEntry`). The local
implementation is :mod:`ironflow.local.sessions.sandbox_sessions`; the wire client is
:mod:`ironflow.sessions.client`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from ironflow import errors

__all__ = [
    "DEFAULT_TTL_S",
    "SESSION_ID",
    "CommandEvent",
    "CommandResult",
    "Exit",
    "FileEntry",
    "Output",
    "SessionInfo",
    "SessionNotFound",
    "check_session_id",
    "parse_duration",
]

#: A session id: ``sbx-`` and 16 lowercase hex digits (a DNS label, so it can name a claim too).
SESSION_ID: Final = re.compile(r"^sbx-[0-9a-f]{16}$")
#: How long a session lives when the caller names no TTL.
DEFAULT_TTL_S: Final = 3600.0
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class SessionNotFound(errors.UsageError):
    """No open session has this id (it was closed, expired, or never existed)."""


def check_session_id(value: str) -> str:
    """``value`` when it is a session id.

    Raises:
        ConfigError: naming the expected form.
    """
    if not SESSION_ID.match(value):
        raise errors.ConfigError(f"invalid sandbox id '{errors.truncate(value, 80)}': expected sbx-<16 hex digits>")
    return value


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``500ms``, ``30s``, ``30m`` or ``2h``.

    Raises:
        ConfigError: not a positive duration.
    """
    match = _DURATION.match(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise errors.ConfigError(f"invalid duration '{errors.truncate(text, 40)}': use e.g. 90s, 30m or 2h")
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


@dataclass(frozen=True)
class SessionInfo:
    """An open session: who made it, what it runs on, until when (epoch seconds)."""

    id: str
    backend: str
    isolation: str
    created_at: float
    expires_at: float
    labels: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "backend": self.backend,
            "isolation": self.isolation,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "labels": dict(self.labels),
            "run_id": self.run_id,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> SessionInfo:
        labels = doc.get("labels") or {}
        run_id = doc.get("run_id")
        return cls(
            id=check_session_id(str(doc["id"])),
            backend=str(doc.get("backend", "local")),
            isolation=str(doc.get("isolation", "")),
            created_at=float(str(doc.get("created_at", 0))),
            expires_at=float(str(doc.get("expires_at", 0))),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
            run_id=None if run_id is None else str(run_id),
        )


@dataclass(frozen=True)
class CommandResult:
    """What a command in a session produced; ``timed_out`` when the session killed it.

    ``stdout`` and ``stderr`` keep the start and the end of what the session sent (the
    client's ``keep_bytes`` of each, as UTF-8); ``*_bytes`` say how much came, ``*_cut`` how
    many bytes of that are left out, where a marker line stands.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_cut: int = 0
    stderr_cut: int = 0


@dataclass(frozen=True)
class Output:
    """A piece of a streamed command's output, as it came."""

    stream: Literal["stdout", "stderr"]
    text: str


@dataclass(frozen=True)
class Exit:
    """The last event of a streamed command."""

    exit_code: int
    timed_out: bool = False


CommandEvent = Output | Exit


@dataclass(frozen=True)
class FileEntry:
    """One entry of a session's directory; ``mod_time`` in epoch seconds."""

    name: str
    size: int
    type: Literal["file", "directory"]
    mod_time: float
