"""The server's snapshot, fork, pause, resume and extend endpoints, over a backend's :class:`SessionSnapshots`
and :class:`SessionControls`.

``POST …/sandboxes/{id}/snapshot`` (``{"name": N}``), ``GET /ironflow/v1/snapshots``,
``DELETE /ironflow/v1/snapshots/{snap}``, ``POST …/{id}/fork`` (``{"count": N}``, counted against
the server's session cap), ``POST …/{id}/pause`` and ``…/resume``, ``POST …/{id}/extend``
(``{"ttl": "30m"}``). A backend without them answers 400 with one line
(:func:`~ironflow.sessions.backend.snapshots_of`, :func:`~ironflow.sessions.backend.controls_of`;
pause and resume need only :func:`~ironflow.sessions.backend.pause_controls_of`, which
agent-sandbox and k8s sessions have too); errors go through the app's answer middleware (404 for a
session or snapshot that is not there, 400 for a refusal). :func:`activity` is what the runtime
proxy wraps each forwarded request in: a
paused session is resumed first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from ironflow import errors
from ironflow.sessions.backend import (
    PauseControls,
    SessionBackend,
    SessionControls,
    SessionSnapshots,
    controls_of,
    pause_controls_of,
    snapshots_of,
)
from ironflow.sessions.remote import API_PATH, SNAPSHOTS_PATH
from ironflow.sessions.values import SnapshotNotFound, check_session_id, check_snapshot_id, parse_duration

__all__ = ["activity", "add_routes", "controls_of", "pause_controls_of", "snapshots_of"]

_MAX_FORKS: Final = 100
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def activity(sessions: SessionBackend, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
    """A forwarded request's block: the session resumed for it and kept from idle suspend (where it can be)."""
    if isinstance(sessions, PauseControls):
        return sessions.active(session_id)
    return contextlib.nullcontext()


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        doc = await request.json()
    except ValueError:
        raise errors.ConfigError("the body must be a JSON object") from None
    if not isinstance(doc, dict):
        raise errors.ConfigError("the body must be a JSON object")
    return doc


def _ttl(value: object) -> float:
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    raise errors.ConfigError('the body must be {"ttl": SECONDS or a duration like "30m"}')


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_FORKS:
        raise errors.ConfigError(f"count must be a whole number from 1 to {_MAX_FORKS}")
    return value


def _not_found(exc: SnapshotNotFound) -> web.Response:
    return web.json_response({"detail": exc.message}, status=404)


def _answering(handler: Handler) -> Handler:
    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except SnapshotNotFound as exc:
            return _not_found(exc)

    return run


def add_routes(app: web.Application, sessions: SessionBackend, *, max_sessions: int) -> None:
    """The endpoints above on ``app`` (before its catch-all proxy route)."""

    def controls(request: web.Request) -> tuple[SessionControls, str]:
        return controls_of(sessions), check_session_id(request.match_info["id"])

    def kept(request: web.Request) -> tuple[SessionSnapshots, str]:
        return snapshots_of(sessions), check_session_id(request.match_info["id"])

    async def snapshot(request: web.Request) -> web.Response:
        backend, session_id = kept(request)
        name = (await _body(request)).get("name")
        if name is not None and not isinstance(name, str):
            raise errors.ConfigError("name must be a string")
        info = await backend.snapshot(session_id, name=name)
        return web.json_response(info.to_json(), status=201)

    async def listing(request: web.Request) -> web.Response:
        found = await snapshots_of(sessions).snapshots()
        return web.json_response({"snapshots": [info.to_json() for info in found]})

    async def remove(request: web.Request) -> web.Response:
        snapshot_id = check_snapshot_id(request.match_info["snap"])
        removed = await snapshots_of(sessions).remove_snapshot(snapshot_id)
        if not removed:
            return _not_found(SnapshotNotFound(f"no snapshot '{snapshot_id}'"))
        return web.json_response({"id": snapshot_id, "removed": True})

    async def fork(request: web.Request) -> web.Response:
        backend, session_id = kept(request)
        count = _count((await _body(request)).get("count", 1))
        if len(sessions.held()) + count > max_sessions:
            return web.json_response(
                {"detail": f"{count} forks would pass this server's cap of {max_sessions} sessions: close some"},
                status=429,
            )
        handles = await backend.fork(session_id, count=count)
        for handle in handles:
            await handle.disconnect()  # the server keeps the sessions; the handles were only receipts
        return web.json_response({"sandboxes": [h.info.to_json() for h in handles]}, status=201)

    async def pause(request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        return web.json_response((await pause_controls_of(sessions).pause(session_id)).to_json())

    async def resume(request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        return web.json_response((await pause_controls_of(sessions).resume(session_id)).to_json())

    async def extend(request: web.Request) -> web.Response:
        backend, session_id = controls(request)
        seconds = _ttl((await _body(request)).get("ttl"))
        return web.json_response((await backend.extend(session_id, seconds)).to_json())

    app.router.add_post(API_PATH + "/{id}/snapshot", _answering(snapshot))
    app.router.add_get(SNAPSHOTS_PATH, _answering(listing))
    app.router.add_delete(SNAPSHOTS_PATH + "/{snap}", _answering(remove))
    app.router.add_post(API_PATH + "/{id}/fork", _answering(fork))
    app.router.add_post(API_PATH + "/{id}/pause", _answering(pause))
    app.router.add_post(API_PATH + "/{id}/resume", _answering(resume))
    app.router.add_post(API_PATH + "/{id}/extend", _answering(extend))
