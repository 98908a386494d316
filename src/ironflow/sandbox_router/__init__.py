"""``ironflow sandbox serve``: one backend's sessions behind one authenticated HTTP server.

The sessions are a :class:`~ironflow.sessions.backend.SessionBackend` the caller (the CLI,
from a provider's ``sessions()``) hands in: this package imports no backend.
:mod:`~ironflow.sandbox_router.app` is the application (ironflow's session endpoints and
agent-sandbox's Sandbox Router protocol in front of each session's runtime);
:mod:`~ironflow.sandbox_router.process` its token, socket and shutdown. Clients are
:class:`~ironflow.sessions.remote.RemoteSessions`, the upstream SDK, or the CLI.
"""

from __future__ import annotations

__all__: list[str] = []
