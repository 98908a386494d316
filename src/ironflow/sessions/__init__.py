"""Sandbox sessions, the same on every backend: the values, the one backend seam, the client faces.

``values``, ``pools`` and ``backend`` are pure (a session's values; :class:`SessionBackend` and
:class:`OpenOptions`; :class:`PoolPolicy`, how sessions are kept warm); ``client`` is the wire
client of the runtime inside a sandbox (:class:`AsyncSandbox`), ``remote`` the sessions of an
``ironflow sandbox serve`` (:class:`RemoteSessions`), ``sync`` the blocking :class:`Sandbox`. Every
name loads on first use, so importing one module of the package loads no other (``ironflow sandbox
exec`` reads two light ones). Backends live in ``ironflow.local``, ``ironflow.k8s`` and
``ironflow.agent_sandbox``; this package imports none.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.sessions.backend import ClusterSessionBackend, PooledSessionBackend, SessionBackend
    from ironflow.sessions.client import AsyncSandbox
    from ironflow.sessions.pools import PoolPolicy
    from ironflow.sessions.remote import RemoteSessions
    from ironflow.sessions.sync import Sandbox
    from ironflow.sessions.values import (
        BACKENDS,
        DEFAULT_TTL_S,
        SESSION_ID,
        CommandEvent,
        CommandResult,
        Exit,
        FileEntry,
        OpenOptions,
        Output,
        SessionInfo,
        SessionNotFound,
        WatchEvent,
        check_session_id,
        parse_duration,
    )

__all__ = [
    "BACKENDS",
    "DEFAULT_TTL_S",
    "SESSION_ID",
    "AsyncSandbox",
    "ClusterSessionBackend",
    "CommandEvent",
    "CommandResult",
    "Exit",
    "FileEntry",
    "OpenOptions",
    "Output",
    "PoolPolicy",
    "PooledSessionBackend",
    "RemoteSessions",
    "Sandbox",
    "SessionBackend",
    "SessionInfo",
    "SessionNotFound",
    "WatchEvent",
    "check_session_id",
    "parse_duration",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "backend": ("ClusterSessionBackend", "PooledSessionBackend", "SessionBackend"),
        "pools": ("PoolPolicy",),
        "values": (
            "BACKENDS",
            "DEFAULT_TTL_S",
            "SESSION_ID",
            "CommandEvent",
            "CommandResult",
            "Exit",
            "FileEntry",
            "OpenOptions",
            "Output",
            "SessionInfo",
            "SessionNotFound",
            "WatchEvent",
            "check_session_id",
            "parse_duration",
        ),
        "client": ("AsyncSandbox",),
        "remote": ("RemoteSessions",),
        "sync": ("Sandbox",),
    },
)
