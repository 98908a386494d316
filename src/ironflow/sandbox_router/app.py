"""The HTTP face of a backend's sessions: ironflow's session endpoints, and the upstream Sandbox Router.

``/ironflow/v1/sandboxes`` opens, lists, shows and closes sessions (snapshots, forks, pause and
extend: :mod:`~ironflow.sandbox_router.controls`). Every other path is a
session's runtime API, routed by the headers agent-sandbox's Sandbox Router reads
(``X-Sandbox-ID``, ``-Namespace``, ``-Port``, ``-Timeout``) with its error answers, so the
upstream SDK works unchanged against a laptop. The raw escaped path goes through as sent;
bodies stream both ways (the runtime enforces its upload limit); ``Authorization``,
hop-by-hop and ``X-Sandbox-*`` headers stop here and the session's own token goes on.

Every request but ``GET /healthz`` needs the server's bearer token (constant-time compare)
before anything else is looked at, so a request without it never reaches a sandbox. A server
holds at most ``max_sessions`` sessions (429 past it), and every failure is a JSON
``{"detail": …}`` answer: an error no handler expected is a 500 naming its type, never a
traceback.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

from ironflow import errors
from ironflow.sandbox_router import controls
from ironflow.sandbox_router.protocol import (
    DEFAULT_PORT,
    PROXY_TIMEOUT_S,
    Handler,
    Refused,
    bearer_auth,
    detail,
    forwarded,
    healthz,
    relay,
    target,
)
from ironflow.secrets import Secret
from ironflow.sessions.backend import SessionBackend
from ironflow.sessions.remote import API_PATH
from ironflow.sessions.values import SESSION_ID, OpenOptions, SessionInfo, SessionNotFound

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_PORT", "PROXY_TIMEOUT_S", "build_app"]

log = logging.getLogger("ironflow.sandbox_router")

#: How many sessions one server holds at once unless told otherwise (each is a sandbox's processes and memory).
DEFAULT_MAX_SESSIONS: Final = 32


@web.middleware
async def _answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as a JSON answer with its status; what no handler expected is a 500 naming
    its type (logged here, never sent: a message may quote a session's env)."""
    try:
        return await handler(request)
    except Refused as exc:
        return detail(exc.status, exc.detail)
    except web.HTTPException:
        raise
    except SessionNotFound as exc:
        return detail(404, exc.message)
    except errors.UsageError as exc:
        return detail(400, exc.message)
    except errors.IronflowError as exc:
        return detail(502, f"the sessions' backend failed: {exc.message}")
    except Exception as exc:
        log.error("%s %s failed: %s", request.method, request.path, type(exc).__name__, exc_info=log.isEnabledFor(10))
        return detail(500, f"the server failed ({type(exc).__name__}); its log says more")


async def _json_body(request: web.Request) -> object:
    """The request's JSON body; 400 when it is not JSON or nests too deep to decode."""
    try:
        return await request.json()
    except ValueError:  # a UnicodeDecodeError too
        raise Refused(400, "the body must be JSON") from None
    except RecursionError:
        raise Refused(400, "the body nests too deep to decode: keep it a few hundred levels at most") from None


# -- the session endpoints --


class _Router:
    """The sessions, and one pooled client per session's runtime socket."""

    def __init__(self, sessions: SessionBackend, max_sessions: int) -> None:
        self.sessions = sessions
        self.max_sessions = max_sessions
        self._opening = 0  # opens under way: counted against the cap with the open sessions
        self._upstreams: dict[str, aiohttp.ClientSession] = {}
        self._reattaching = asyncio.Lock()

    async def create(self, request: web.Request) -> web.Response:
        doc = await _json_body(request)
        options = OpenOptions.from_json(doc)  # a ConfigError: 400
        if options.from_snapshot is not None:
            controls.snapshots_of(self.sessions)  # refused in one line where the backend has none
        if options.idle_suspend is not None:
            controls.pause_controls_of(self.sessions)
        wanted = (doc.get("backend") if isinstance(doc, dict) else None) or self.sessions.backend
        if wanted != self.sessions.backend:
            return detail(
                400,
                f"this server serves {self.sessions.backend} sessions, not {wanted}: "
                f"start one with `ironflow sandbox serve --backend {wanted}`",
            )
        if len(self.sessions.held()) + self._opening >= self.max_sessions:
            return detail(
                429,
                f"this server holds its cap of {self.max_sessions} sessions: close one, "
                "or start `ironflow sandbox serve --max-sessions N`",
            )
        self._opening += 1
        try:
            sandbox = await self.sessions.open(options)
        except errors.UsageError as exc:
            return detail(400, exc.message)
        except errors.IronflowError as exc:
            return detail(500, f"the sandbox did not start: {exc.message}")
        finally:
            self._opening -= 1
        await sandbox.disconnect()  # the server keeps the session; the handle was only its receipt
        await self._prune()
        return web.json_response(sandbox.info.to_json(), status=201)

    async def _known(self) -> builtins.list[SessionInfo]:
        """The sessions held here, and every other one the backend reaches (a cluster's, by labels)."""
        held = self.sessions.held()
        ids = {info.id for info in held}
        return [*held, *(info for info in await self.sessions.list() if info.id not in ids)]

    async def listing(self, request: web.Request) -> web.Response:
        try:
            known = await self._known()
        except errors.IronflowError as exc:
            return detail(502, f"could not list the cluster's sessions: {exc.message}")
        return web.json_response({"sandboxes": [info.to_json() for info in known]})

    async def _info(self, request: web.Request) -> dict[str, object]:
        session_id = request.match_info["id"]
        for info in self.sessions.held():
            if info.id == session_id:
                return info.to_json()
        try:
            found = SESSION_ID.match(session_id) is not None and await self._reattach(session_id)
        except errors.IronflowError as exc:
            raise Refused(502, f"could not look the sandbox up in the cluster: {exc.message}") from None
        if found:
            return await self._info(request)
        raise Refused(404, f"no open sandbox '{errors.truncate(session_id, 80)}'")

    async def _reattach(self, session_id: str) -> bool:
        """Hold a session this server did not open (a previous server's, in the cluster); False: there is
        none (a local backend holds every session it has, so it never finds one)."""
        async with self._reattaching:  # one bridge per session, however many requests ask at once
            if any(info.id == session_id for info in self.sessions.held()):
                return True
            try:
                handle = await self.sessions.connect(session_id)
            except SessionNotFound:
                return False
            await handle.disconnect()  # the session stays held here; the handle was only its receipt
        log.info("sandbox session %s reattached from the cluster", session_id)
        return True

    async def show(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(await self._info(request))
        except Refused as exc:
            return detail(exc.status, exc.detail)

    async def delete(self, request: web.Request) -> web.Response:
        try:
            doc = await self._info(request)
        except Refused as exc:
            return detail(exc.status, exc.detail)
        await self.sessions.close(str(doc["id"]))
        await self._prune()
        return web.json_response({"id": doc["id"], "closed": True})

    # -- the runtime API --

    async def changes(self, request: web.Request) -> web.Response:
        """``POST …/{id}/changes`` (``{"apply": bool}``): the session's workspace patch, as ``exec -o json`` has it."""
        session_id = request.match_info["id"]
        doc = await _json_body(request) if request.can_read_body else {}
        apply = doc.get("apply", False) if isinstance(doc, dict) else None
        if not isinstance(apply, bool):
            return detail(400, 'the body must be {"apply": true|false}')
        try:
            found = await self.sessions.changes(session_id, apply=apply)
        except SessionNotFound as exc:
            return detail(404, exc.message)
        except errors.WorkspaceConflict as exc:
            return detail(409, exc.message)
        except errors.UsageError as exc:
            return detail(400, exc.message)
        except errors.IronflowError as exc:
            return detail(500, exc.message)
        return web.json_response(found.to_json())

    async def _prune(self) -> None:
        """Drop the clients of sessions that ended (closed, expired, idle)."""
        open_ids = {info.id for info in self.sessions.held()}
        for session_id in [s for s in self._upstreams if s not in open_ids]:
            # Taken before the await: a prune of a request beside this one may take it first.
            client = self._upstreams.pop(session_id, None)
            if client is not None:
                await client.close()

    async def _upstream(self, session_id: str) -> tuple[aiohttp.ClientSession, Secret, str]:
        """The client of a held session's runtime, its token, and the base of its URLs: a runtime
        over HTTP (a Kubernetes pod's) is its own base, one on a unix socket ``http://sandbox``."""
        if not SESSION_ID.match(session_id):
            raise Refused(502, f"Could not connect to the backend sandbox: {session_id}")
        try:
            socket_path, token = self.sessions.route(session_id)
        except SessionNotFound:
            try:
                found = await self._reattach(session_id)
            except errors.IronflowError:
                found = False
            if not found:
                raise Refused(502, f"Could not connect to the backend sandbox: {session_id}") from None
            socket_path, token = self.sessions.route(session_id)
        over_http = socket_path.startswith("http://")
        client = self._upstreams.get(session_id)
        if client is None:
            client = self._upstreams[session_id] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector() if over_http else aiohttp.UnixConnector(path=socket_path),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            )
        return client, token, socket_path if over_http else "http://sandbox"

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        try:
            wanted, timeout = target(request.headers)
            session_id = wanted.name
            await self._upstream(session_id)  # its refusals first: a session that is not there
        except Refused as exc:
            return detail(exc.status, exc.detail)
        if not request.raw_path.startswith("/"):
            return detail(400, "Invalid path.")
        async with controls.activity(self.sessions, session_id):  # a paused session is resumed first,
            client, token, base = await self._upstream(session_id)  # then routed: its new pod's address
            headers = forwarded(request.headers)
            headers["Authorization"] = f"Bearer {token.reveal()}"
            url = URL(base + request.raw_path, encoded=True)
            body = request.content if request.body_exists else None
            try:
                async with asyncio.timeout(timeout):
                    upstream = await client.request(
                        request.method, url, headers=headers, data=body, allow_redirects=False
                    )
            except TimeoutError:
                return detail(504, f"Timed out waiting for the backend sandbox: {session_id}")
            except aiohttp.ClientError:
                await self._prune()
                return detail(502, f"Could not connect to the backend sandbox: {session_id}")
            async with upstream:
                return await relay(request, upstream)

    async def aclose(self) -> None:
        for client in self._upstreams.values():
            await client.close()
        self._upstreams.clear()


def build_app(sessions: SessionBackend, token: Secret, *, max_sessions: int = DEFAULT_MAX_SESSIONS) -> web.Application:
    """The server's application over ``sessions``, holding at most ``max_sessions`` at once;
    its clients close with the app."""
    if max_sessions < 1:
        raise errors.ConfigError(f"max_sessions must be at least 1, got {max_sessions}")
    router = _Router(sessions, max_sessions)
    app = web.Application(middlewares=[_answers, bearer_auth(token)], handler_args={"max_field_size": 65536})
    app.router.add_get("/healthz", healthz)
    app.router.add_post(API_PATH, router.create)
    app.router.add_get(API_PATH, router.listing)
    app.router.add_get(API_PATH + "/{id}", router.show)
    app.router.add_delete(API_PATH + "/{id}", router.delete)
    app.router.add_post(API_PATH + "/{id}/changes", router.changes)
    controls.add_routes(app, sessions, max_sessions=max_sessions)
    app.router.add_route("*", "/{tail:.*}", router.proxy)

    async def cleanup(_app: web.Application) -> None:
        await router.aclose()

    app.on_cleanup.append(cleanup)
    return app
