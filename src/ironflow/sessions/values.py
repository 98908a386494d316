"""Sandbox sessions as values, the same on every backend (pure).

A session is a sandbox kept open: commands run in it one after another, files move in and
out. What a backend hands back is described here once: the session (:class:`SessionInfo`),
a command's result (:class:`~ironflow.results.CommandResult`, the one every command returns,
re-exported here), the events of a streamed command (:class:`Output`, :class:`Exit`), a
directory entry (:class:`FileEntry`), a change under a watched directory (:class:`WatchEvent`),
and what a new session is opened with (:class:`OpenOptions`, parsed once from a server's JSON). The one
interface of every backend is :class:`~ironflow.sessions.backend.SessionBackend`; the wire
client is :mod:`ironflow.sessions.client`.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ironflow import errors, labels
from ironflow.command_result import CommandResult
from ironflow.egress import EgressPolicy
from ironflow.sessions.ids import (
    SESSION_ID,
    SNAPSHOT_ID,
    SessionNotFound,
    SnapshotNotFound,
    check_session_id,
    check_snapshot_id,
)
from ironflow.step_sandbox import is_env_name
from ironflow.workspaces import Workspace

__all__ = [
    "BACKENDS",
    "DEFAULT_TTL_S",
    "SESSION_ID",
    "SNAPSHOT_ID",
    "CommandEvent",
    "CommandResult",
    "Exit",
    "FileEntry",
    "OpenOptions",
    "Output",
    "SessionInfo",
    "SessionNotFound",
    "SnapshotInfo",
    "SnapshotNotFound",
    "WatchEvent",
    "WatchEventType",
    "check_session_id",
    "check_snapshot_id",
    "legacy_options",
    "parse_duration",
]

#: How long a session lives when the caller names no TTL.
DEFAULT_TTL_S: Final = 3600.0
_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
#: The backends a session may live on (``backend`` in a server's open request: its own, or refused).
BACKENDS: Final = ("local", "k8s", "agent-sandbox")
_OPEN_FIELDS: Final = frozenset(
    {
        "ttl",
        "idle_timeout",
        "idle_suspend",
        "labels",
        "run_id",
        "env",
        "backend",
        "workspace",
        "egress",
        "from_snapshot",
    }
)


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
    #: Frozen by ``pause`` or its idle suspend: its processes stopped, its files kept.
    paused: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "backend": self.backend,
            "isolation": self.isolation,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "labels": dict(self.labels),
            "run_id": self.run_id,
            "paused": self.paused,
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
            paused=doc.get("paused") is True,
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """An immutable snapshot of a session's files: what it holds and where it came from."""

    id: str
    name: str | None
    session_id: str
    size_bytes: int
    created_at: float
    isolation: str
    #: Which of the session's trees it holds: ``workspace`` (at /workspace), ``home`` (HOME).
    trees: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "session_id": self.session_id,
            "size_bytes": self.size_bytes,
            "created_at": self.created_at,
            "isolation": self.isolation,
            "trees": list(self.trees),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> SnapshotInfo:
        name, trees = doc.get("name"), doc.get("trees") or []
        return cls(
            id=check_snapshot_id(str(doc["id"])),
            name=None if name is None else str(name),
            session_id=str(doc.get("session_id", "")),
            size_bytes=int(str(doc.get("size_bytes", 0))),
            created_at=float(str(doc.get("created_at", 0))),
            isolation=str(doc.get("isolation", "")),
            trees=tuple(str(t) for t in trees) if isinstance(trees, list) else (),
        )


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


WatchEventType = Literal["create", "write", "remove", "rename", "overflow"]
_WATCH_TYPES: Final = ("create", "write", "remove", "rename", "overflow")


@dataclass(frozen=True)
class WatchEvent:
    """A change under a watched directory, ``name`` relative to it (``old_name``: a rename's old one).

    ``overflow``: events were lost, ``dropped`` of them (None: the kernel's count, unknown); with a
    ``name``, that directory is past the watch limit and unwatched.
    """

    type: WatchEventType
    name: str
    is_dir: bool = False
    old_name: str | None = None
    dropped: int | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> WatchEvent | None:
        """The event of one line of a watch stream; None for a line that is none (a heartbeat, the head).

        Raises:
            ValueError: a line that claims to be an event and is malformed.
        """
        kind = doc.get("type")
        if kind is None:
            return None
        if kind not in _WATCH_TYPES or not isinstance(doc.get("name", ""), str):
            raise ValueError("not a watch event")
        old, dropped = doc.get("old_name"), doc.get("dropped")
        if (old is not None and not isinstance(old, str)) or (dropped is not None and type(dropped) is not int):
            raise ValueError("not a watch event")
        return cls(kind, doc.get("name", ""), bool(doc.get("is_dir")), old, dropped)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"type": self.type, "name": self.name, "is_dir": self.is_dir}
        if self.old_name is not None:
            doc["old_name"] = self.old_name
        if self.type == "overflow":
            doc["dropped"] = self.dropped
        return doc


@dataclass(frozen=True)
class OpenOptions:
    """What a new session is opened with, on any backend.

    Args:
        ttl: seconds until the session ends, whatever happens (default an hour).
        idle_timeout: seconds without a request after which it ends (None: only the TTL).
        labels: the caller's labels, shown by ``list`` (label keys and values).
        run_id: the run it belongs to: ``release_run(run_id)`` ends it with the run's steps.
        env: variables every command of the session sees (credentials are refused by the backend).
        workspace: what the session works on (a host directory or a git URL, as a step's).
        egress: what its commands may reach through the egress proxy (:mod:`ironflow.egress`),
            added to the provider's; local bubblewrap sessions only for now.
        idle_suspend: seconds without a request after which it is paused (its processes frozen,
            its files kept); the next request resumes it. Local sessions only.
        from_snapshot: a snapshot's id: the session starts with its files (local sessions only;
            not with ``workspace``).
    """

    ttl: float = DEFAULT_TTL_S
    idle_timeout: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    workspace: Workspace | None = None
    egress: EgressPolicy | None = None
    idle_suspend: float | None = None
    from_snapshot: str | None = None

    def __post_init__(self) -> None:
        if not self.ttl > 0 or any(v is not None and not v > 0 for v in (self.idle_timeout, self.idle_suspend)):
            raise errors.ConfigError("ttl, idle_timeout and idle_suspend must be positive numbers of seconds")
        if self.from_snapshot is not None:
            check_snapshot_id(self.from_snapshot)
            if self.workspace is not None:
                raise errors.ConfigError("a session opens from a snapshot or with a workspace, not both")

    @classmethod
    def from_json(cls, doc: object) -> OpenOptions:
        """The options of a server's open request (pure); its ``backend`` field is checked here
        and left to the server to compare with its own.

        Raises:
            ConfigError: naming the first field that is wrong.
        """
        if not isinstance(doc, dict):
            raise errors.ConfigError("the body must be a JSON object")
        if unknown := sorted(set(doc) - _OPEN_FIELDS):
            known = ", ".join(sorted(_OPEN_FIELDS))
            raise errors.ConfigError(f"unknown field '{errors.truncate(unknown[0], 40)}': use {known}")
        session_labels = _strings(doc, "labels")
        for key, value in session_labels.items():
            if problem := labels.label_key_problem(key) or labels.label_value_problem(key, value):
                raise errors.ConfigError(problem)
        env = _strings(doc, "env")
        if bad := [name for name in env if not is_env_name(name)]:
            raise errors.ConfigError(f"invalid env name '{errors.truncate(bad[0], 40)}': use [A-Za-z_][A-Za-z0-9_]*")
        backend = doc.get("backend")
        if backend is not None and backend not in BACKENDS:
            known = ", ".join(BACKENDS)
            raise errors.ConfigError(f"invalid backend '{errors.truncate(str(backend), 40)}': use {known}")
        run_id = doc.get("run_id")
        if run_id is not None and not (isinstance(run_id, str) and labels.is_valid_label_value(run_id)):
            raise errors.ConfigError("run_id must be a label value: 1-63 of [A-Za-z0-9._-], alphanumeric at both ends")
        source = doc.get("workspace")
        if source is not None and (not isinstance(source, str) or not source):
            raise errors.ConfigError("workspace must be a directory on the server's machine or GIT_URL[@REF]")
        ttl = _seconds(doc, "ttl")
        egress = None if doc.get("egress") is None else EgressPolicy.from_json(doc["egress"])
        snapshot = doc.get("from_snapshot")
        if snapshot is not None and not isinstance(snapshot, str):
            raise errors.ConfigError("from_snapshot must be a snapshot id: snap-<16 hex digits>")
        return cls(
            ttl=DEFAULT_TTL_S if ttl is None else ttl,
            idle_timeout=_seconds(doc, "idle_timeout"),
            labels=session_labels,
            run_id=run_id,
            env=env,
            workspace=None if source is None else Workspace.parse(source),
            egress=egress,
            idle_suspend=_seconds(doc, "idle_suspend"),
            from_snapshot=snapshot,
        )

    def to_json(self) -> dict[str, object]:
        """The request body :meth:`from_json` reads back. A workspace travels as its source
        (``GIT_URL@REF`` for a ref); a directory should be absolute, the server's own path.

        Raises:
            ConfigError: a workspace with settings the wire does not carry (apply, sizes...).
        """
        body: dict[str, object] = {"ttl": self.ttl, "idle_timeout": self.idle_timeout, "labels": dict(self.labels)}
        body.update(run_id=self.run_id, env=dict(self.env))
        if self.idle_suspend is not None:
            body["idle_suspend"] = self.idle_suspend
        if self.from_snapshot is not None:
            body["from_snapshot"] = self.from_snapshot
        if self.egress is not None:
            body["egress"] = self.egress.to_json()
        if self.workspace is not None:
            source = self.workspace.source
            text = source if self.workspace.ref is None else f"{source}@{self.workspace.ref}"
            if Workspace.parse(text) != self.workspace:
                raise errors.ConfigError(
                    "a server's session takes a workspace's source (and git ref) only: leave its other settings default"
                )
            body["workspace"] = text
        return body


def legacy_options(options: OpenOptions | None, fields: Mapping[str, Any], *, caller: str) -> OpenOptions | None:
    """``options``, or the keywords ``open`` took before :class:`OpenOptions` (``ttl=``, ...,
    a workspace as text), with a DeprecationWarning: they go in the next release.

    Raises:
        TypeError: both, or a keyword ``open`` never took.
    """
    if not fields:
        return options
    if options is not None:
        raise TypeError(f"{caller}: give OpenOptions or the old keywords, not both")
    if unknown := sorted(set(fields) - {"ttl", "idle_timeout", "labels", "run_id", "env", "workspace"}):
        raise TypeError(f"{caller}: unexpected keyword argument {unknown[0]!r}")
    warnings.warn(
        f"{caller}(ttl=..., ...) is deprecated: pass OpenOptions(...) (the keywords go in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )
    given = {name: value for name, value in fields.items() if value is not None}
    if isinstance(given.get("workspace"), str):
        given["workspace"] = Workspace.parse(given["workspace"])
    return OpenOptions(**given)


def _seconds(doc: Mapping[str, Any], name: str) -> float | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise errors.ConfigError(f"{name} must be a positive number of seconds or a duration like 30m")
    return float(value)


def _strings(doc: Mapping[str, Any], name: str) -> dict[str, str]:
    value = doc.get(name) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise errors.ConfigError(f"{name} must be an object of strings")
    return value
