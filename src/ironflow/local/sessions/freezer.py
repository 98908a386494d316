"""Pausing a local session: every process of its sandbox stopped, its files and memory kept (I/O).

With a cgroup freezer (v2, or v1's ``freezer`` controller: :class:`~ironflow.local.sandbox.cgroups.SandboxCgroup`)
the session's cgroup is frozen: no task of it runs and none can start, and nothing in the sandbox
can see or undo it. Without one, each process of the sandbox's tree (the host's view of it, walked
from the sandbox's first process by ``/proc/PID/task/*/children``) gets SIGSTOP through a pidfd,
so a pid reused meanwhile is never signalled; the walk repeats until it finds no new process (a
stopped process forks no more). SIGSTOP cannot be caught or ignored, but a process could be sent
SIGCONT by another process of the same uid outside the sandbox: the freezer is the strong form.
Resuming thaws the cgroup, or sends SIGCONT down the same tree. A kill (the session's end) works on
a paused session either way: SIGKILL reaches frozen and stopped tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Final

from ironflow import errors
from ironflow.local.sandbox import cgroups

__all__ = ["Freezer", "children", "tree"]

#: How many walks of the process tree a SIGSTOP pause makes at most before it gives up.
_ROUNDS: Final = 50


class Freezer:
    """Pause and resume one session's sandbox (``pid``: its first process; ``group``: its cgroup)."""

    def __init__(self, pid: int, group: cgroups.SandboxCgroup | None) -> None:
        self.pid, self.group = pid, group
        self._frozen: contextlib.AsyncExitStack | None = None
        self._stopped: list[int] = []
        self._lock = asyncio.Lock()  # a pause and a resume never interleave

    @property
    def method(self) -> str:
        """How this session pauses: ``cgroup freezer`` or ``SIGSTOP``."""
        return "cgroup freezer" if self.group is not None and self.group.can_freeze else "SIGSTOP"

    @property
    def paused(self) -> bool:
        return self._frozen is not None or bool(self._stopped)

    async def pause(self, when: Callable[[], bool] | None = None) -> bool:
        """Stop every process of the sandbox (no-op when paused, or when ``when`` says no at the
        moment it would begin); whether this call paused it.

        Raises:
            SandboxError: the freezer failed, or the tree kept growing (the processes run on).
        """
        async with self._lock:
            if self.paused or (when is not None and not when()):
                return False
            await self._pause()
            return True

    async def _pause(self) -> None:
        if self.group is not None and self.group.can_freeze:
            stack = contextlib.AsyncExitStack()
            try:
                await stack.enter_async_context(self.group.frozen())
            except cgroups.FreezeFailed as exc:
                raise errors.SandboxError(f"the session could not be paused: {exc}") from None
            self._frozen = stack
            return
        self._stopped = await asyncio.to_thread(_stop_tree, self.pid)

    async def resume(self) -> None:
        """Let the sandbox run again (no-op when it is not paused)."""
        async with self._lock:
            await self._resume()

    async def _resume(self) -> None:
        frozen, self._frozen = self._frozen, None
        if frozen is not None:
            await frozen.aclose()
        stopped, self._stopped = self._stopped, []
        for pid in stopped:
            _signal(pid, signal.SIGCONT)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """The sandbox paused for the block, as it was after (a paused one stays paused)."""
        if not await self.pause():
            yield
            return
        try:
            yield
        finally:
            await self.resume()


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return found


def tree(root: int) -> list[int]:
    """``root`` and every process under it now, parents first (the host's view)."""
    out: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        out.append(pid)
        pending += children(pid)
    return out


def _signal(pid: int, sig: int) -> bool:
    """``sig`` to ``pid`` through a pidfd; False when it is gone."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        signal.pidfd_send_signal(fd, sig)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _stop_tree(root: int) -> list[int]:
    """SIGSTOP to every process of ``root``'s tree until a walk finds no new one; the pids, parents first.

    Raises:
        SandboxError: the tree still grew after :data:`_ROUNDS` walks (the stopped ones run again).
    """
    stopped: list[int] = []
    for _ in range(_ROUNDS):
        new = [pid for pid in tree(root) if pid not in stopped]
        if not new:
            return stopped
        for pid in new:
            # A pid read from the tree may have died and been reused: the pidfd is taken, then the
            # process checked to be still in the tree, so the signal goes to that process only.
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if pid == root or pid in tree(root):
                    signal.pidfd_send_signal(fd, signal.SIGSTOP)
                    stopped.append(pid)
            except OSError:
                pass
            finally:
                os.close(fd)
    for pid in stopped:
        _signal(pid, signal.SIGCONT)
    raise errors.SandboxError("the session could not be paused: its processes kept starting new ones")
