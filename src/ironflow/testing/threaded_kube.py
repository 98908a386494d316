"""A :class:`~ironflow.testing.kube.KubeTestServer` on its own event loop in a thread, for
testing code that runs its own ``asyncio.run`` (the ``ironflow`` CLI commands).

The test thread stays synchronous; every call into the server goes through
:meth:`ThreadedKube.call` (a coroutine) or :meth:`ThreadedKube.soon` (a plain callable),
so the server's state is only touched on its own loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, TypeVar

from ironflow.testing.kube import KubeTestServer

__all__ = ["ThreadedKube"]

T = TypeVar("T")

#: Longest wait for one call into the server's loop (start, stop, a scripted change).
_CALL_TIMEOUT_S = 30.0


class ThreadedKube:
    """``with ThreadedKube(namespaces=("default", "agents")) as kube:`` — ``kube.server`` is
    running; write ``kube.server.kubeconfig_yaml()`` to a file for the CLI."""

    def __init__(self, *, namespaces: Iterable[str] = ("default", "kube-system")) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kube-test-server", daemon=True)
        self.thread.start()
        self.server = self.call(KubeTestServer(namespaces=tuple(namespaces)).start())

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=_CALL_TIMEOUT_S)

    def soon(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` on the server's loop (e.g. ``lambda: kube.server.script_pods(...)``)."""

        async def run() -> T:
            return fn()

        return self.call(run())

    def close(self) -> None:
        """Stop the server, then the loop and its thread."""
        try:
            self.call(self.server.stop())
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
