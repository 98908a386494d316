"""A :class:`~ironflow.testing.kube.KubeTestServer` on its own event loop in a thread, for
testing code that runs its own ``asyncio.run`` (the ``ironflow`` CLI commands).

The test thread stays synchronous; every call into the server goes through
:meth:`ThreadedKube.call` (a coroutine) or :meth:`ThreadedKube.soon` (a plain callable),
so the server's state is only touched on its own loop. ``server`` refuses the test's thread:
read from there, the state races the loop (a deleted running pod leaves one loop turn after
the delete's answer, so a check made in between saw a pod the command had deleted).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, TypeVar

from ironflow.kube import api
from ironflow.testing.kube import KubeTestServer, Obj

__all__ = ["ThreadedKube"]

T = TypeVar("T")

#: Longest wait for one call into the server's loop (start, stop, a scripted change).
_CALL_TIMEOUT_S = 30.0


class ThreadedKube:
    """``with ThreadedKube(namespaces=("default", "agents")) as kube:`` — ``kube.server`` is
    running; write ``kube.kubeconfig_yaml()`` to a file for the CLI."""

    def __init__(self, *, namespaces: Iterable[str] = ("default", "kube-system")) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kube-test-server", daemon=True)
        self.thread.start()
        self._server = self.call(KubeTestServer(namespaces=tuple(namespaces)).start())

    @property
    def server(self) -> KubeTestServer:
        """The server, on its own loop only: inside :meth:`soon` or a coroutine given to :meth:`call`."""
        if threading.current_thread() is not self.thread:
            raise RuntimeError("ThreadedKube.server is for its own loop: use kube.soon(lambda: kube.server...)")
        return self._server

    def kubeconfig_yaml(self) -> str:
        """A kubeconfig naming the server (fixed once it has started)."""
        return self._server.kubeconfig_yaml()

    def objects(self, resource: api.Resource, namespace: str | None = None) -> list[Obj]:
        """The objects stored now, read on the server's loop."""
        return self.soon(lambda: self._server.objects(resource, namespace))

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop and wait for its result (from any thread but the loop's)."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("ThreadedKube.call waits on the server's loop: it cannot run on that loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=_CALL_TIMEOUT_S)

    def soon(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` on the server's loop (e.g. ``lambda: kube.server.script_pods(...)``)."""

        async def run() -> T:
            return fn()

        return self.call(run())

    def close(self) -> None:
        """Stop the server, then the loop and its thread."""
        try:
            self.call(self._server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()

    def __enter__(self) -> ThreadedKube:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
