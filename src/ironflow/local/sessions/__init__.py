"""Local sandbox sessions: the session host, its gVisor runtime, agents and workspace changesets.

``local_sessions`` holds :class:`LocalSessions` (bubblewrap or gVisor, as the provider says; built
by ``LocalSandboxProvider(...).sessions()``), the table of open sessions; ``starter`` starts a
session's sandbox with the runtime inside and hands it out; ``prewarm`` keeps started sandboxes warm
for the sessions that fit them, ``handouts`` fills a warm one's workspace and hands it out;
``gvisor_runtime`` the runsc bundle and socket; ``agents`` an agent step inside a session;
``changesets`` a session's workspace copy and its changes; ``provided`` what a session needs of its
provider. ``ironflow.local.sessions`` was a module until this release: its names still resolve here,
with a DeprecationWarning and ``LocalSessions`` keeps its old face there: the provider optional (a default
``LocalSandboxProvider``), ``open(ttl=..., ...)`` by keywords, ``connect`` and ``list`` blocking,
``close_run``. The new one (``local_sessions.LocalSessions``) is the async
:class:`~ironflow.sessions.backend.SessionBackend`.
"""

from __future__ import annotations

import warnings
from typing import Any

from ironflow.sessions.values import legacy_options

__all__: list[str] = []

_MOVED = ("LocalSessions", "DEFAULT_MAX_UPLOAD_BYTES", "RUNTIME_DIR", "RUNTIME_PATH")


def __getattr__(name: str) -> object:
    """The old module's public names, each use warned (the next release drops them)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.{name} moved to ironflow.local.sessions.local_sessions; build sessions with "
        "LocalSandboxProvider(...).sessions() (the old name goes in the next release)",
        DeprecationWarning,
        stacklevel=2,
    )
    # Deferred: this package's modules load without the provider, which imports them.
    from ironflow.local.sessions import local_sessions

    if name != "LocalSessions":
        return getattr(local_sessions, name)
    return _legacy_local_sessions()


def _legacy_local_sessions() -> type[Any]:
    """``LocalSessions`` with its old face (see the module docstring) over the new one."""
    from ironflow.local.sandbox_provider import LocalSandboxProvider
    from ironflow.local.sessions.local_sessions import LocalSessions

    class _LegacyLocalSessions(LocalSessions):
        def __init__(self, provider: Any = None, **options: Any) -> None:
            super().__init__(provider or LocalSandboxProvider(), **options)

        async def open(self, options: Any = None, *, agent: bool = False, **fields: Any) -> Any:
            return await super().open(legacy_options(options, fields, caller="LocalSessions.open"), agent=agent)

        def connect(self, session_id: str) -> Any:
            return self._handle(self._get(session_id))

        def list(self) -> Any:
            return self.held()

        async def close_run(self, run_id: str) -> int:
            return await self.release_run(run_id)

    _LegacyLocalSessions.__name__ = _LegacyLocalSessions.__qualname__ = "LocalSessions"
    return _LegacyLocalSessions
