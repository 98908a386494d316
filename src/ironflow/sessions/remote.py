"""The sessions of an ``ironflow sandbox serve`` process, over HTTP: open, connect, list, close.

Local sessions live in the process that opened them, so every other process reaches them
through a server: this is its client, a :class:`~ironflow.sessions.backend.SessionBackend`
with the same handles (:class:`AsyncSandbox`) as every backend, holding no session itself.
The server and its token come from the arguments, else ``$IRONFLOW_SANDBOX_SERVER`` and
``$IRONFLOW_SANDBOX_TOKEN``, else the token file the server wrote (:func:`token_file`). The token
is a header value only.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import os
from typing import Any, Final

from ironflow.secrets import Secret
from ironflow.sessions.client import AsyncSandbox, RuntimeClient
from ironflow.sessions.serve_access import SERVER_ENV, TOKEN_ENV, resolve_server, resolve_token, token_file
from ironflow.sessions.values import (
    OpenOptions,
    SessionInfo,
    SessionNotFound,
    SnapshotInfo,
    check_session_id,
    check_snapshot_id,
    legacy_options,
)
from ironflow.workspaces import WorkspaceChanges

__all__ = [
    "API_PATH",
    "SERVER_ENV",
    "SNAPSHOTS_PATH",
    "TOKEN_ENV",
    "RemoteSessions",
    "resolve_server",
    "resolve_token",
    "token_file",
]

#: The server's own endpoints (every other path is a session's runtime API).
API_PATH: Final = "/ironflow/v1/sandboxes"
SNAPSHOTS_PATH: Final = "/ironflow/v1/snapshots"


class RemoteSessions:
    """The sessions of one server. ``aclose()`` drops the connection, never a session.

    ``backend``, when named, is the one the caller expects the server to serve: an ``open`` on a
    server of another is refused. Unnamed, :attr:`backend` is ``remote`` (whichever it serves).
    """

    def __init__(
        self, server: str | None = None, *, token: Secret | str | None = None, backend: str | None = None
    ) -> None:
        self.server = resolve_server(server)
        self._expected = backend
        self.backend = backend or "remote"
        self._token = resolve_token(token)
        self._client = RuntimeClient(base_url=self.server, headers=self._headers())

    def __repr__(self) -> str:
        return f"RemoteSessions({self.server!r})"

    def _headers(self, session_id: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self._token.reveal()}"}
        if session_id is not None:
            headers["X-Sandbox-ID"] = session_id
        return headers

    def _handle(self, info: SessionInfo) -> AsyncSandbox:
        client = RuntimeClient(base_url=self.server, headers=self._headers(info.id))
        session_id = info.id

        async def closer() -> None:
            await self.close(session_id)

        return AsyncSandbox(info, client, closer)

    async def open(self, options: OpenOptions | None = None, **legacy: Any) -> AsyncSandbox:
        """A new session on the server, as its backend's ``open`` makes one there (the expected
        backend, when named, must be the server's: else ConfigError). A ``workspace`` is a
        directory of the server's machine (a relative one is made absolute here) or a git URL.

        Raises:
            ConfigError: a workspace with settings the wire does not carry; the server's refusal.
        """
        expected = legacy.pop("backend", None) or self._expected  # the old keywords: for one release
        options = legacy_options(options, legacy, caller="RemoteSessions.open") or OpenOptions()
        workspace = options.workspace
        if workspace is not None and not workspace.is_git and not os.path.isabs(workspace.source):
            # A relative directory is the caller's: the server resolves nothing against its own cwd.
            absolute = dataclasses.replace(workspace, source=os.path.join(os.getcwd(), workspace.source))
            options = dataclasses.replace(options, workspace=absolute)
        body = options.to_json()
        if expected is not None:
            body["backend"] = expected
        doc = await self._client.json("POST", API_PATH, json=body)
        return self._handle(SessionInfo.from_json(doc))

    async def changes(self, session_id: str, *, apply: bool = False) -> WorkspaceChanges:
        """The patch of the session's workspace since open (with ``apply``: written into its
        directory, all or none). Raises: SessionNotFound; ConfigError: no workspace, or a conflict."""
        try:
            doc = await self._client.json(
                "POST", f"{API_PATH}/{check_session_id(session_id)}/changes", json={"apply": apply}
            )
        except FileNotFoundError:
            raise SessionNotFound(f"no open sandbox session '{session_id}'") from None
        return WorkspaceChanges.from_json(doc)

    async def info(self, session_id: str) -> SessionInfo:
        """Raises: SessionNotFound: the server has no such open session."""
        try:
            doc = await self._client.json("GET", f"{API_PATH}/{check_session_id(session_id)}")
        except FileNotFoundError:
            raise SessionNotFound(f"no open sandbox session '{session_id}'") from None
        return SessionInfo.from_json(doc)

    async def connect(self, session_id: str) -> AsyncSandbox:
        """A handle on an open session (reattach by id). Raises: SessionNotFound."""
        return self._handle(await self.info(session_id))

    async def list(self) -> builtins.list[SessionInfo]:
        doc = await self._client.json("GET", API_PATH)
        return [SessionInfo.from_json(item) for item in doc["sandboxes"]]

    def held(self) -> builtins.list[SessionInfo]:
        """None: a server's sessions are held by the server."""
        return []

    def route(self, session_id: str) -> tuple[str, Secret]:
        """Raises: SessionNotFound: always; the server routes its sessions (``connect`` gives a handle)."""
        raise SessionNotFound(f"sandbox session '{session_id}' is held by the server at {self.server}, not here")

    async def close(self, session_id: str) -> bool:
        """End a session (every process in it dies); False when it was not open."""
        try:
            await self._client.json("DELETE", f"{API_PATH}/{check_session_id(session_id)}")
        except FileNotFoundError:
            return False
        return True

    # -- snapshots, fork, pause, extend (the server's backend must have them: else its one-line 400) --

    async def _session_call(self, session_id: str, action: str, body: dict[str, object]) -> Any:
        try:
            return await self._client.json("POST", f"{API_PATH}/{check_session_id(session_id)}/{action}", json=body)
        except FileNotFoundError:
            raise SessionNotFound(f"no open sandbox session '{session_id}'") from None

    async def snapshot(self, session_id: str, *, name: str | None = None) -> SnapshotInfo:
        return SnapshotInfo.from_json(await self._session_call(session_id, "snapshot", {"name": name}))

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        doc = await self._client.json("GET", SNAPSHOTS_PATH)
        return [SnapshotInfo.from_json(item) for item in doc["snapshots"]]

    async def remove_snapshot(self, snapshot_id: str) -> bool:
        try:
            await self._client.json("DELETE", f"{SNAPSHOTS_PATH}/{check_snapshot_id(snapshot_id)}")
        except FileNotFoundError:
            return False
        return True

    async def fork(self, session_id: str, *, count: int = 1) -> builtins.list[AsyncSandbox]:
        doc = await self._session_call(session_id, "fork", {"count": count})
        return [self._handle(SessionInfo.from_json(item)) for item in doc["sandboxes"]]

    async def pause(self, session_id: str) -> SessionInfo:
        return SessionInfo.from_json(await self._session_call(session_id, "pause", {}))

    async def resume(self, session_id: str) -> SessionInfo:
        return SessionInfo.from_json(await self._session_call(session_id, "resume", {}))

    async def extend(self, session_id: str, ttl: float) -> SessionInfo:
        return SessionInfo.from_json(await self._session_call(session_id, "extend", {"ttl": ttl}))

    def active(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Nothing to do here: the server resumes its sessions on each request."""
        return contextlib.nullcontext()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> RemoteSessions:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
