"""A session runtime's requests to its pod, each one ``pods/exec`` of the runtime itself (I/O).

The pod runs no server: each request sends the runtime's own files and the request on the exec's
stdin (:mod:`ironflow.k8s.sessions.wire`), and the reply streams back as the exec's stdout,
read piece by piece (:class:`Reply`). The bridge (:mod:`ironflow.k8s.sessions.bridge`) serves
the runtime API on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Final

from ironflow import errors
from ironflow.k8s.sessions import wire
from ironflow.kube import api as kube
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.sessions import replies

__all__ = ["MAX_OUTPUT_BYTES", "PodRuntime", "Reply"]

#: The runtime's cap on each of a command's stdout and stderr.
MAX_OUTPUT_BYTES: Final = 16 << 20
#: What KubeApi.exec keeps of a reply besides streaming it (only the stderr of a failed boot matters).
_KEEP_BYTES: Final = 64 << 10


def _bundle() -> tuple[bytes, tuple[int, ...]]:
    """The runtime's files, as the boot line reads them from stdin."""
    folder = os.path.dirname(SERVER_PATH)
    parts = []
    for name in wire.RUNTIME_FILES:
        with open(os.path.join(folder, name), "rb") as f:
            parts.append(f.read())
    return b"".join(parts), tuple(len(p) for p in parts)


class PodRuntime:
    """Runtime requests to one pod, each one exec; the pod's answer streams to a callback."""

    def __init__(
        self,
        api: kube.KubeApi,
        namespace: str,
        pod: str,
        container: str,
        *,
        max_upload_bytes: int,
        python: str,
        workspace: str = ".",
    ) -> None:
        self.api, self.namespace, self.pod, self.container = api, namespace, pod, container
        self.python = python
        self._bundle, sizes = _bundle()
        self._command = wire.runtime_command(
            sizes, max_upload_bytes=max_upload_bytes, max_output_bytes=MAX_OUTPUT_BYTES, python=python,
            workspace=workspace,
        )  # fmt: skip

    async def request(
        self,
        method: str,
        target: str,
        body: bytes,
        sink: Callable[[bytes], None],
        *,
        content_type: str | None = None,
        more: AsyncIterator[bytes] | None = None,
    ) -> kube.ExecResult:
        """Send one request, then ``more`` as it comes (a command's controls); ``sink`` gets the
        reply's bytes as they come.

        Raises:
            KubernetesError: the exec failed (``KubeNotFound``: the pod is gone).
        """
        nonce = secrets.token_hex(8)
        stdin = self._bundle + wire.render_request(nonce, method, target, body, content_type=content_type)

        def on_output(channel: int, chunk: bytes) -> None:
            if channel == 1:
                sink(chunk)

        return await self.api.exec(
            self.namespace,
            self.pod,
            self._command,
            container=self.container,
            stdin=stdin,
            max_output_bytes=_KEEP_BYTES,
            on_output=on_output,
            more_stdin=more,
        )

    async def kill_group(self, pid: int, signal_number: int = 9) -> None:
        """Signal (SIGKILL unless told) a command's process group in the pod; a pod already gone is no error."""
        with contextlib.suppress(errors.KubernetesError, ValueError):
            command = wire.kill_command(pid, python=self.python, signal_number=signal_number)
            await self.api.exec(self.namespace, self.pod, command, container=self.container)


class Reply:
    """One runtime request in flight: its reply's head and body pieces, in order."""

    def __init__(self, runtime: PodRuntime, session_id: str) -> None:
        self.runtime, self.session_id = runtime, session_id
        self.parser = replies.ReplyParser()
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.failure: str | None = None
        self.task: asyncio.Task[None] | None = None
        self._first: list[bytes] = []

    def start(
        self, method: str, target: str, body: bytes, content_type: str | None, more: AsyncIterator[bytes] | None = None
    ) -> None:
        async def run() -> None:
            try:
                result = await self.runtime.request(
                    method, target, body, self.queue.put_nowait, content_type=content_type, more=more
                )
                if self.parser.status is None and result.exit_code != 0:
                    said = errors.truncate(result.stderr.decode(errors="replace").strip(), 300)
                    self.failure = f"the session pod could not run the runtime (is python3 in its image?): {said}"
            except errors.KubeNotFound:
                self.failure = f"Could not connect to the backend sandbox: {self.session_id}"
            except errors.KubernetesError as exc:
                self.failure = f"the session pod did not answer: {exc}"
            finally:
                self.queue.put_nowait(None)

        self.task = asyncio.create_task(run())

    async def pieces(self) -> AsyncGenerator[bytes, None]:
        """The body's pieces once the head is in (``parser.status``), to its end."""
        first, self._first = self._first, []
        for piece in first:
            yield piece
        while not self.parser.done:
            data = await self.queue.get()
            if data is None:
                return
            for piece in self.parser.feed(data):
                yield piece

    async def head(self) -> int | None:
        """Wait for the head: the reply's status, or None when the exec ended without one."""
        while self.parser.status is None:
            data = await self.queue.get()
            if data is None:
                return None
            self._first += self.parser.feed(data)
        return self.parser.status

    async def text(self, limit: int) -> str:
        """The body's first ``limit`` bytes as text (an error answer's message)."""
        async with contextlib.aclosing(self.pieces()) as pieces:
            said = await replies.at_most(pieces, limit, cut=True)
        return (said or b"").decode(errors="replace")

    async def aclose(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
