"""pods/exec for the Kubernetes test server: a local subprocess stands in for the container.

:class:`ExecKubeTestServer` is a :class:`~ironflow.testing.kube.KubeTestServer` that also
answers ``GET .../pods/<name>/exec`` websocket upgrades with the ``v4.channel.k8s.io``
protocol, as a kubelet would through the API server: stdin frames (channel 0) are piped to
the process as they arrive, stdout and stderr come back on channels 1 and 2 as they are
written, and the exit status ends the session on channel 3 (``Success``, or ``Failure`` with
an ``ExitCode`` cause). A pod that is not Running, an unknown container, or an exec the test
did not enable is refused with 400 like a real server.

:func:`local_exec` runs the command on this machine with the container's plain env values
and the overrides the test gives (``HOME`` on a temporary directory, say). It is a stand-in:
no isolation; use it only for commands the test wrote or the provider under test renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import WSMsgType, web

from ironflow.k8s import api
from ironflow.testing.kube import KubeTestServer

__all__ = ["ExecKubeTestServer", "ExecRecord", "ExecRunner", "local_exec"]

Obj = dict[str, Any]
#: Starts the process standing in for ``command`` in ``container`` of ``pod``.
ExecRunner = Callable[[Obj, str, list[str]], Awaitable[asyncio.subprocess.Process]]


def local_exec(env: Mapping[str, str] | None = None, *, cwd: str | None = None) -> ExecRunner:
    """A runner that starts ``command`` locally with the container's plain env, then ``env`` on top.

    ``PATH`` comes from this process unless ``env`` sets it; ``valueFrom`` entries are skipped
    (no Secret is ever resolved by the stand-in).
    """
    overrides = dict(env or {})

    async def run(pod: Obj, container: str, command: list[str]) -> asyncio.subprocess.Process:
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


class ExecKubeTestServer(KubeTestServer):
    """The test server with pods/exec. Enable it with :meth:`serve_exec`; every exec is in ``execs``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._exec_runner: ExecRunner | None = None
        self.execs: list[ExecRecord] = []
        self._processes: set[asyncio.subprocess.Process] = set()

    async def __aenter__(self) -> ExecKubeTestServer:
        await self.start()
        return self

    @property
    def running_execs(self) -> int:
        """Commands still running (a client that left must not leave one behind)."""
        return len(self._processes)

    def serve_exec(self, runner: ExecRunner | None) -> None:
        """Run execs with ``runner`` (e.g. :func:`local_exec`); None refuses them again."""
        self._exec_runner = runner

    async def stop(self) -> None:
        for process in list(self._processes):
            _kill(process)
        await super().stop()

    async def _dispatch(
        self, request: web.Request, t: Any, namespace: str | None, name: str | None, sub: str | None, verb: str
    ) -> web.StreamResponse:
        if sub == "exec" and t.plural == "pods" and t.group == "" and name is not None:
            return await self._exec(request, namespace or "", name)
        return await super()._dispatch(request, t, namespace, name, sub, verb)

    def _refuse(self, message: str) -> web.Response:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": 400}
        return web.Response(status=400, text=json.dumps(body), content_type="application/json")

    async def _exec(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pod = self.get_object(api.PODS, namespace, name)
        if pod is None:
            body = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
            body["message"] = f'pods "{name}" not found'
            return web.Response(status=404, text=json.dumps(body), content_type="application/json")
        phase = pod.get("status", {}).get("phase")
        if phase != "Running":
            return self._refuse(f"unable to upgrade connection: pod {name} is not running (phase {phase})")
        containers = [c.get("name") for c in pod.get("spec", {}).get("containers", [])]
        container = request.query.get("container") or (containers[0] if containers else "")
        if container not in containers:
            return self._refuse(f"container {container} is not valid for pod {name}")
        command = request.query.getall("command", [])
        if not command:
            return self._refuse("you must specify at least one command for the container")
        if self._exec_runner is None:
            return self._refuse("exec is not enabled on this test server: call serve_exec(local_exec(...))")
        record = ExecRecord(namespace, name, container, list(command))
        self.execs.append(record)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        process = await self._exec_runner(pod, container, list(command))
        self._processes.add(process)

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
            await asyncio.gather(pump_out(process.stdout, 1), pump_out(process.stderr, 2))

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
            record.exit_code = code
            if code == 0:
                status: Obj = {"metadata": {}, "status": "Success"}
            else:
                status = {
                    "metadata": {},
                    "status": "Failure",
                    "message": f"command terminated with non-zero exit code: exit status {code}",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
                }
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        finally:
            for task in (reader, writer):
                task.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)
            _kill(process)
            await process.wait()
            self._processes.discard(process)
            with contextlib.suppress(ConnectionError):
                await asyncio.wait_for(ws.close(), 1.0)
        return ws


def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill the command and everything it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
