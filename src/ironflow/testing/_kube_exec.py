"""pods/exec for the Kubernetes test server: what a kubelet answers, with a stand-in container.

:class:`ExecService` answers ``GET .../pods/<name>/exec`` websocket upgrades with the
``v4.channel.k8s.io`` protocol, as a kubelet would through the API server: stdin frames
(channel 0) reach the command as they arrive, stdout and stderr come back on channels 1
and 2, and the exit status ends the session on channel 3 (``Success``, or ``Failure`` with
reason ``NonZeroExitCode`` and an ``ExitCode`` cause, so ``KubeApi.exec`` returns the code).
A pod that is not Running, an unknown container, or an exec the test did not enable is
refused with 400 like a real server.

The "container" is whatever the test's runner says: :func:`local_exec` starts the command
on this machine (no isolation: only for commands the test wrote or the code under test
renders); :func:`scripted_exec` answers from a pure function of the pod and the command,
to play a container state this machine does not have (a token file, a read-only root).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

__all__ = ["ExecRecord", "ExecReply", "ExecRunner", "ExecService", "exit_status", "local_exec", "scripted_exec"]

Obj = dict[str, Any]


@dataclass(frozen=True)
class ExecReply:
    """A scripted command's whole answer: its output streams and exit code."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0


#: Starts what stands in for ``command`` in ``container`` of ``pod``: a process, or a reply.
ExecRunner = Callable[[Obj, str, list[str]], Awaitable["asyncio.subprocess.Process | ExecReply"]]


def local_exec(env: Mapping[str, str] | None = None, *, cwd: str | None = None) -> ExecRunner:
    """A runner that starts ``command`` locally with the container's plain env, then ``env`` on top.

    ``PATH`` comes from this process unless ``env`` sets it; ``valueFrom`` entries are skipped
    (no Secret is ever resolved by the stand-in).
    """
    overrides = dict(env or {})

    async def run(pod: Obj, container: str, command: list[str]) -> asyncio.subprocess.Process | ExecReply:
        spec: Obj = next(
            (c for c in pod.get("spec", {}).get("containers", []) if c.get("name") == container),
            {},
        )
        process_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        process_env.update({e["name"]: e["value"] for e in spec.get("env") or [] if "value" in e})
        process_env.update(overrides)
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=process_env,
            cwd=cwd,
            start_new_session=True,  # one process group: killing it reaches the command's children
        )

    return run


def scripted_exec(answer: Callable[[Obj, str, list[str]], ExecReply]) -> ExecRunner:
    """A runner that answers every exec with ``answer(pod, container, command)``; nothing runs."""

    async def run(pod: Obj, container: str, command: list[str]) -> asyncio.subprocess.Process | ExecReply:
        return answer(pod, container, command)

    return run


class ExecRecord:
    """One exec the server ran: where, what, the stdin it got, and the exit code."""

    def __init__(self, namespace: str, pod: str, container: str, command: list[str]) -> None:
        self.namespace = namespace
        self.pod = pod
        self.container = container
        self.command = command
        self.stdin = bytearray()
        self.exit_code: int | None = None

    def __repr__(self) -> str:
        return f"ExecRecord({self.namespace}/{self.pod}, {self.command[:2]!r}, exit={self.exit_code})"


def exit_status(code: int) -> Obj:
    """The channel-3 Status a kubelet sends when the command ends with ``code`` (pure)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: exit status {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def _refuse(message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": 400}
    return web.Response(status=400, text=json.dumps(body), content_type="application/json")


class ExecService:
    """The exec state of one test server: the runner, every exec seen, commands still running."""

    def __init__(self) -> None:
        self.runner: ExecRunner | None = None
        self.execs: list[ExecRecord] = []
        self.processes: set[asyncio.subprocess.Process] = set()
        self._pumps: set[asyncio.Task[web.WebSocketResponse]] = set()

    async def stop(self) -> None:
        """Kill every command still running (the server is going away) and wait for their sessions' ends."""
        for process in list(self.processes):
            _kill(process)
        if self._pumps:  # bounded: a child that left the command's group may hold its output open
            _, stuck = await asyncio.wait(self._pumps, timeout=5.0)
            for pump in stuck:
                pump.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)

    async def handle(self, request: web.Request, namespace: str, name: str, pod: Obj | None) -> web.StreamResponse:
        if pod is None:
            body = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
            body["message"] = f'pods "{name}" not found'
            return web.Response(status=404, text=json.dumps(body), content_type="application/json")
        phase = pod.get("status", {}).get("phase")
        if phase != "Running":
            return _refuse(f"unable to upgrade connection: pod {name} is not running (phase {phase})")
        containers = [c.get("name") for c in pod.get("spec", {}).get("containers", [])]
        container = request.query.get("container") or (containers[0] if containers else "")
        if container not in containers:
            return _refuse(f"container {container} is not valid for pod {name}")
        command = request.query.getall("command", [])
        if not command:
            return _refuse("you must specify at least one command for the container")
        if self.runner is None:
            return _refuse("exec is not enabled on this test server: call serve_exec(local_exec(...))")
        record = ExecRecord(namespace, name, container, list(command))
        self.execs.append(record)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        started = await self.runner(pod, container, list(command))
        if isinstance(started, ExecReply):
            return await self._reply(ws, record, started)
        # The session is the service's task, not the handler's: a client that goes away cancels the
        # handler (handler_cancellation), and a cancelled cleanup would leave the command's pipes open.
        pump = asyncio.create_task(self._pump(request, ws, record, started))
        self._pumps.add(pump)
        pump.add_done_callback(self._pumps.discard)
        return await asyncio.shield(pump)

    async def _reply(self, ws: web.WebSocketResponse, record: ExecRecord, reply: ExecReply) -> web.WebSocketResponse:
        try:
            for channel, data in ((1, reply.stdout), (2, reply.stderr)):
                if data:
                    await ws.send_bytes(bytes([channel]) + data)
            record.exit_code = reply.exit_code
            await ws.send_bytes(b"\x03" + json.dumps(exit_status(reply.exit_code)).encode())
        finally:
            with contextlib.suppress(ConnectionError):
                await asyncio.wait_for(ws.close(), 1.0)
        return ws

    async def _pump(
        self, request: web.Request, ws: web.WebSocketResponse, record: ExecRecord, process: asyncio.subprocess.Process
    ) -> web.WebSocketResponse:
        self.processes.add(process)

        async def pump_in() -> None:
            async for message in ws:
                if message.type is not WSMsgType.BINARY or not message.data:
                    continue
                if message.data[0] == 0 and process.stdin is not None:
                    record.stdin += message.data[1:]
                    with contextlib.suppress(ConnectionError):
                        process.stdin.write(message.data[1:])
                        await process.stdin.drain()

        async def pump_out(stream: asyncio.StreamReader | None, channel: int) -> None:
            while stream is not None and (chunk := await stream.read(64 * 1024)):
                await ws.send_bytes(bytes([channel]) + chunk)

        if request.query.get("stdin") not in ("true", "1") and process.stdin is not None:
            process.stdin.close()  # no stdin attached: the command reads EOF at once

        async def pump_both() -> None:
            outs = [
                asyncio.ensure_future(pump_out(process.stdout, 1)),
                asyncio.ensure_future(pump_out(process.stderr, 2)),
            ]
            try:
                await asyncio.gather(*outs)
            finally:  # one failing (the client went away) stops the other: nothing still reads the pipes
                for out in outs:
                    out.cancel()
                await asyncio.gather(*outs, return_exceptions=True)

        reader = asyncio.ensure_future(pump_in())
        writer = asyncio.ensure_future(pump_both())
        try:
            await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if not writer.done():  # the client went away: stop the command, as a deleted pod would
                _kill(process)
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await writer
                return ws
            await writer
            code = await process.wait()
            code = 128 - code if code < 0 else code  # killed by signal N: 128+N, as a shell reports it
            record.exit_code = code
            await ws.send_bytes(b"\x03" + json.dumps(exit_status(code)).encode())
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            _kill(process)
            # What the command wrote and nobody read holds its pipes open, and wait() returns only once
            # they are closed: read them to their end first.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(_drain(process.stdout), _drain(process.stderr)), 5.0)
            await process.wait()
            self.processes.discard(process)
            with contextlib.suppress(ConnectionError):
                await asyncio.wait_for(ws.close(), 1.0)
        return ws


async def _drain(stream: asyncio.StreamReader | None) -> None:
    while stream is not None and await stream.read(1 << 16):
        pass


def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill the command and everything it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
