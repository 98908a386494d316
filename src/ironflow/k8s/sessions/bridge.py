"""A Kubernetes session's runtime API on a host unix socket, answered by exec in its pod (I/O).

The pod runs no server (kwok and other API-only clusters run no container at all): this
bridge serves the runtime API of :mod:`ironflow.sandbox_runtime.server` on an abstract unix
socket (no file: nothing is left on disk when this process is SIGKILLed) that admits only
this process's own user (``SO_PEERCRED``, before anything else) and then only its own bearer
token, so the session handle (:class:`~ironflow.sessions.client.AsyncSandbox`) and ``ironflow
sandbox serve``'s router talk to it exactly as to a local session. Each request becomes one
``pods/exec`` of the runtime itself (:mod:`ironflow.k8s.sessions.runtime_exec`): the pod does the
path checks, the tar filters, the limits and the process-group kill, never this host. The pod is
the agent's, so what it answers is checked here: a reply that is not HTTP, an event line that is
no event or longer than any the runtime sends, or output past the runtime's own cap fails the
command (its process group killed), never a buffer that grows or a waiter left waiting.

Commands are held here: a command's exec lasts as long as the command, its events are kept
(bounded by the runtime's output cap) for a later wait, a kill or a signal is one more exec to
the process group its first event names, and a command in a pty or with ``keep_stdin`` gets
its stdin writes and resizes down its own exec's stdin, as control lines after the request. A
request body is sent whole on the exec's stdin, so uploads stop at ``max_upload_bytes`` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import socket
import struct
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

from aiohttp import web

from ironflow import errors
from ironflow.k8s.sessions import runtime_exec, wire
from ironflow.secrets import Secret
from ironflow.sessions import replies

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "Bridge"]


#: The largest request body (an upload, a tar stream in): exec sends stdin whole, so it is held.
DEFAULT_MAX_UPLOAD_BYTES: Final = 256 << 20
#: The most output text a command's events hold: the runtime's cap on each of stdout and stderr,
#: and its notices. A runtime sending more is not the runtime: its command fails.
_MAX_KEPT_CHARS: Final = 2 * runtime_exec.MAX_OUTPUT_BYTES + 4096
_EXT: Final = "/ironflow/v1/commands"
_CHUNK: Final = 65536
_PEERCRED: Final = struct.Struct("3i")  # pid, uid, gid
#: The most control bytes (stdin, base64 in JSON lines) a command holds not yet sent to its pod.
_MAX_PENDING: Final = 2 << 20
#: Seconds a close waits for the requests it cut short to end their own cleanup (an exec's close).
_DRAIN_S: Final = 30.0


class _Command:
    """A command running in the pod: its events from the start, its pid, its end."""

    def __init__(self, runtime: runtime_exec.PodRuntime, session_id: str, spec: dict[str, Any]) -> None:
        self.runtime = runtime
        self.events: list[dict[str, Any]] = []
        self.pid: int | None = None
        self.finished = False
        self.timed_out = False
        self._changed = asyncio.Event()
        self._pid_known = asyncio.Event()  # set once the first event named it, or the exec ended
        self._reply = runtime_exec.Reply(runtime, session_id)
        self.pty = bool(spec.get("pty"))
        wants = self.pty or bool(spec.get("keep_stdin"))  # controls, on its exec's stdin past the request
        self.frames: asyncio.Queue[bytes | None] | None = asyncio.Queue() if wants else None
        self.pending = 0
        self._kept = 0  # characters of output in the events
        body = json.dumps({**spec, "background": False}).encode()
        more = None if self.frames is None else self._controls(self.frames)
        self._reply.start("POST", _EXT, body, "application/json", more)
        self.task = asyncio.create_task(self._collect())

    async def _controls(self, frames: asyncio.Queue[bytes | None]) -> AsyncIterator[bytes]:
        while (frame := await frames.get()) is not None:
            yield frame
            self.pending -= len(frame)

    def control(self, frame: bytes) -> str | None:
        """Queue one control line for the pod's runtime; else why not (409: it ended, or holds too much)."""
        if self.finished:
            return "the command has ended"
        if self.frames is None:
            return "the command's stdin is closed (keep it open with keep_stdin)"
        if self.pending and self.pending + len(frame) > _MAX_PENDING:
            return f"the command has not read its stdin ({_MAX_PENDING} bytes waiting)"
        self.pending += len(frame)
        self.frames.put_nowait(frame)
        return None

    def _push(self, event: dict[str, Any]) -> None:
        if "exit_code" in event:
            if self.finished:
                return
            self.finished = True
            event = {**event, "timed_out": bool(event.get("timed_out")) or self.timed_out}
        self.events.append(event)
        self._changed.set()
        self._changed = asyncio.Event()

    async def _collect(self) -> None:
        try:
            await self._read_reply()
        except errors.SandboxError as exc:  # the pod's runtime is not trusted to answer as it must
            if not self.finished:  # past its exit, the command's answer is whole (and its group gone)
                self._fail(str(exc))
                if self.pid is not None:
                    await self.runtime.kill_group(self.pid)
        finally:
            self._pid_known.set()
            if self.frames is not None:
                self.frames.put_nowait(None)
            await self._reply.aclose()

    async def _read_reply(self) -> None:
        status = await self._reply.head()
        if status is not None and status != 200:
            self._fail(errors.truncate(_message_of(await self._reply.text(replies.MAX_ERROR_BYTES)), 500))
            return
        lines = replies.LineSplitter(replies.MAX_EVENT_LINE_BYTES)
        async for piece in self._reply.pieces():
            for line in lines.feed(piece):
                self._take(line)
        if not self.finished:
            self._fail(self._reply.failure or "the command's stream ended without its exit")

    def _take(self, line: bytes) -> None:
        """One event line from the pod's runtime, checked and rebuilt: only what an event holds goes on.

        Raises: SandboxError: the line is no event, or the output passed the runtime's own cap."""
        try:
            event = replies.command_event(line)
            first = json.loads(line) if event is None and not self._pid_known.is_set() else {}
        except (ValueError, TypeError, OverflowError) as exc:
            raise errors.SandboxError(f"the session pod sent a malformed command event: {type(exc).__name__}") from None
        if event is None:
            if "id" in first:  # the stream's first line names the process group a kill signals
                pid = first.get("pid")
                self.pid = pid if type(pid) is int and pid > 1 else None
                self._pid_known.set()
            return
        kind, value, timed_out = event
        if kind == "exit":
            self._push({"exit_code": value, "timed_out": timed_out})
            return
        self._kept += len(str(value))
        if self._kept > _MAX_KEPT_CHARS:
            raise errors.SandboxError(
                f"the session pod sent more output than its cap ({runtime_exec.MAX_OUTPUT_BYTES} bytes)"
            )
        self._push({kind: value})

    def _fail(self, message: str) -> None:
        self._push({"stderr": f"ironflow: {message}\n"})
        self._push({"exit_code": 1, "timed_out": False})

    async def signal(self, number: int) -> bool:
        """A signal to its process group once its pid is known; False when it had ended."""
        await self._pid_known.wait()
        if running := self.pid is not None and not self.finished:
            await self.runtime.kill_group(self.pid, number)
        return running

    async def kill(self, *, timed_out: bool = False) -> bool:
        """True when it was still running. A command asked to die before its pid came waits for it:
        the kill must reach the process, not be lost in the exec's first moments."""
        if self.finished:
            return False
        self.timed_out = self.timed_out or timed_out
        await self._pid_known.wait()
        if self.pid is not None and not self.finished:
            await self.runtime.kill_group(self.pid)
        return True

    async def follow(self, timeout: float | None) -> AsyncIterator[dict[str, Any]]:  # noqa: ASYNC109 - the command's own limit
        """Each event from the first, as it comes; past ``timeout`` seconds the group is killed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        index = 0
        while True:
            while index < len(self.events):
                event = self.events[index]
                index += 1
                yield event
                if "exit_code" in event:
                    return
            changed = self._changed
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                await self.kill(timed_out=True)
                deadline = None
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await changed.wait()


def _same_user(request: web.Request) -> bool:
    """Whether the peer of the request's unix socket runs as this process's user."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is None:
        return False
    try:
        _, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    except OSError:
        return False
    return bool(uid == os.getuid())


def _message_of(text: str) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(text).get("message") or text)
    return text


class Bridge:
    """The runtime API of one Kubernetes session on a host unix socket (see the module doc).

    Args:
        env: the session's environment, under every command's own ``env``.
    """

    def __init__(
        self,
        runtime: runtime_exec.PodRuntime,
        session_id: str,
        *,
        env: Mapping[str, str],
        max_upload_bytes: int,
    ) -> None:
        self.runtime, self.session_id, self.env = runtime, session_id, dict(env)
        self.max_upload_bytes = max_upload_bytes
        self.token = Secret(secrets.token_urlsafe(32))
        # Abstract (a leading NUL): the socket dies with this process and never names a file.
        self.socket_path = f"\0ironflow-k8s-session-{session_id}-{secrets.token_hex(8)}"
        self.commands: dict[str, _Command] = {}
        self._ids = 0
        self._last_active = time.monotonic()
        self._runner: web.AppRunner | None = None
        self._handling: set[asyncio.Task[Any]] = set()  # the requests under way (busy), each in its own task

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1)
        await self._runner.setup()
        await web.UnixSite(self._runner, self.socket_path).start()

    async def aclose(self) -> None:
        """Stop serving; the commands' execs end (the pod's deletion ends the commands)."""
        for command in self.commands.values():
            command.task.cancel()
        await asyncio.gather(*(c.task for c in self.commands.values()), return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()  # requests still under way after a second are cancelled
        if self._handling:  # a cancelled request ends its exec first: nothing of it outlives the close
            await asyncio.wait(set(self._handling), timeout=_DRAIN_S)

    def idle_for(self) -> float:
        """Seconds with no request and no running command (0 while busy)."""
        if self._handling or any(not c.finished for c in self.commands.values()):
            return 0.0
        return time.monotonic() - self._last_active

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not _same_user(request):  # an abstract socket has no file mode: the peer's uid stands in
            return web.json_response({"message": "Forbidden"}, status=403)
        got = request.headers.get("Authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {self.token.reveal()}".encode()):
            return web.json_response({"message": "Unauthorized"}, status=401)
        task = asyncio.current_task()
        assert task is not None  # aiohttp runs each request in a task of its own
        self._handling.add(task)
        try:
            return await self._route(request)
        finally:
            self._handling.discard(task)
            self._last_active = time.monotonic()

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == _EXT and request.method == "POST":
            return await self._start(request)
        if path.startswith(_EXT + "/"):
            cid, _, action = path[len(_EXT) + 1 :].partition("/")
            found = self.commands.get(cid)
            if found is None:
                return web.json_response({"message": f"no command {cid}"}, status=404)
            if request.method == "POST" and action == "kill":
                return web.json_response({"killed": await found.kill()})
            if request.method == "GET" and action == "status":
                return web.json_response({"id": cid, "running": not found.finished, "pty": False})
            if request.method == "POST" and action in ("stdin", "signal", "resize"):
                return await self._control(request, found, action)
            try:
                timeout = float(request.query["timeout"]) if "timeout" in request.query else None
            except ValueError:
                return web.json_response({"message": "timeout is a number of seconds"}, status=400)
            return await self._stream(request, cid, found, timeout)
        return await self._relay(request)

    async def _control(self, request: web.Request, command: _Command, action: str) -> web.Response:
        """Stdin and resize go down the command's exec's stdin (its runtime applies them); a signal is an exec."""
        body = await self._body(request)
        if body is None or len(body) > _MAX_PENDING // 2:
            return web.json_response({"message": f"a control carries at most {_MAX_PENDING // 2} bytes"}, status=413)
        try:
            wanted = wire.read_control(action, body, eof=request.query.get("eof") in ("1", "true"), pty=command.pty)
        except ValueError as exc:
            return web.json_response({"message": str(exc)}, status=400)
        if wanted.signal is not None:
            return web.json_response({"sent": await command.signal(wanted.signal)})
        if refused := command.control(wanted.frame):
            return web.json_response({"message": refused}, status=409)
        return web.json_response(dict(wanted.answer))

    async def _body(self, request: web.Request) -> bytes | None:
        parts, size = [], 0
        async for data in request.content.iter_chunked(_CHUNK):
            size += len(data)
            if size > self.max_upload_bytes:
                return None
            parts.append(data)
        return b"".join(parts)

    def _too_large(self) -> web.Response:
        return web.json_response(
            {"message": f"Request body exceeds the limit of {self.max_upload_bytes} bytes"}, status=413
        )

    async def _start(self, request: web.Request) -> web.StreamResponse:
        body = await self._body(request)
        if body is None:
            return self._too_large()
        try:
            spec = json.loads(body or b"{}")
            argv = spec.get("argv") if isinstance(spec, dict) else None
        except ValueError as exc:
            return web.json_response({"message": f"bad request: {exc}"}, status=400)
        if not isinstance(argv, list) or not argv:
            return web.json_response({"message": "the command is empty"}, status=400)
        spec["env"] = {**self.env, **(spec.get("env") or {})}
        self._ids += 1
        cid = f"c{self._ids}"
        command = _Command(self.runtime, self.session_id, spec)
        self.commands[cid] = command
        finished = [k for k, c in self.commands.items() if c.finished and k != cid]
        for key in finished[:-64]:  # keep the last finished ones for a late wait
            del self.commands[key]
        if spec.get("background"):
            return web.json_response({"id": cid})
        return await self._stream(request, cid, command, None)

    async def _stream(
        self,
        request: web.Request,
        cid: str,
        command: _Command,
        timeout: float | None,  # noqa: ASYNC109 - the command's own limit
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        try:
            await response.write(json.dumps({"id": cid}).encode() + b"\n")
            async for event in command.follow(timeout):
                await response.write(json.dumps(event).encode() + b"\n")
        except BaseException:  # the client went away (Ctrl-C): its foreground command goes too
            if not request.path.startswith(_EXT + "/"):
                await asyncio.shield(command.kill())
            raise
        await response.write_eof()
        return response

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        """Any other request: the runtime in the pod answers it, streamed back as it comes."""
        body = await self._body(request)
        if body is None:
            return self._too_large()
        reply = runtime_exec.Reply(self.runtime, self.session_id)
        reply.start(request.method, request.raw_path, body, request.headers.get("Content-Type"))
        try:
            try:
                status = await reply.head()
            except errors.SandboxError as exc:  # past the head, the answer breaks off with the error
                return web.json_response({"message": str(exc)}, status=502)
            if status is None:
                await reply.aclose()
                message = reply.failure or f"Could not connect to the backend sandbox: {self.session_id}"
                return web.json_response({"message": message}, status=502)
            headers = {"Content-Type": wire.content_type_of(reply.parser.headers)}
            length = reply.parser.headers.get("content-length")
            response = web.StreamResponse(status=status, headers=headers)
            if length is not None:
                response.content_length = int(length)
            await response.prepare(request)
            async for piece in reply.pieces():
                await response.write(piece)
            await response.write_eof()
            return response
        finally:
            await reply.aclose()
