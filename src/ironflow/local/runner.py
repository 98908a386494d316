"""Start a sandbox process, feed it, read it, and make sure it is gone (I/O).

The one place sandbox processes start and die. Each sandbox leads its own process group
(``start_new_session``): on a timeout, a cancellation or ``release_run`` the group gets
``SIGKILL``, and the wait for it is shielded from the caller's cancellation, so no call
returns while its sandbox still runs. bubblewrap's ``--die-with-parent`` and the pid
namespace take everything inside the sandbox along.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from typing import Final

from ironflow import errors
from ironflow.provider import LogSink

__all__ = ["SandboxProcesses"]

_KILL_GRACE_S: Final = 5.0


class SandboxProcesses:
    """The sandboxes one provider started and that have not ended, with the run ids they
    belong to (their own run and its root run, so releasing a root takes its sub-runs)."""

    def __init__(self) -> None:
        self._running: dict[asyncio.subprocess.Process, frozenset[str]] = {}

    async def run(
        self,
        argv: list[str],
        env: Mapping[str, str],
        *,
        stdin: bytes | None,
        limit_s: float,
        sink: LogSink | None,
        run_ids: frozenset[str] = frozenset(),
        pass_fds: tuple[int, ...] = (),
    ) -> tuple[int, str, str]:
        """Exit code, stdout and stderr of ``argv``; lines go to ``sink`` as they arrive.

        Raises:
            AgentTimeout: it ran past ``limit_s`` (its process group is gone by then).
        """
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),  # the whole sandbox environment: never on the argv
            cwd="/",
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # one process group to kill on timeout or cancellation
            pass_fds=pass_fds,
        )
        self._running[proc] = run_ids
        try:
            async with asyncio.timeout(limit_s):
                return await _communicate(proc, stdin, sink)
        except TimeoutError:
            raise errors.AgentTimeout(limit_s) from None
        finally:
            self._running.pop(proc, None)
            if proc.returncode is None:
                _kill_tree(proc)
                # Shielded: a cancelled caller still waits for the tree to be gone.
                await asyncio.shield(_reap(proc))

    async def kill_run(self, run_id: str) -> int:
        """Kill every sandbox of ``run_id`` (or of a run whose root it is); returns how many."""
        victims = [p for p, ids in self._running.items() if run_id in ids and p.returncode is None]
        for proc in victims:
            _kill_tree(proc)
        for proc in victims:
            await _reap(proc)
        return len(victims)


def _kill_tree(proc: asyncio.subprocess.Process) -> None:
    # bwrap/runsc lead their own process group; --die-with-parent and the pid namespace
    # take everything inside with them.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(TimeoutError, ProcessLookupError):
        async with asyncio.timeout(_KILL_GRACE_S):
            await proc.wait()


async def _communicate(
    proc: asyncio.subprocess.Process, stdin: bytes | None, sink: LogSink | None
) -> tuple[int, str, str]:
    assert proc.stdout is not None
    assert proc.stderr is not None

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin or b"")
            await proc.stdin.drain()
        proc.stdin.close()

    async def read(stream: asyncio.StreamReader, name: str) -> str:
        chunks: list[str] = []
        while line := await stream.readline():
            text = line.decode(errors="replace")
            chunks.append(text)
            if sink is not None:
                sink.log(name, text.rstrip("\n"))
        return "".join(chunks)

    async with asyncio.TaskGroup() as group:
        group.create_task(feed())
        out = group.create_task(read(proc.stdout, "stdout"))
        err = group.create_task(read(proc.stderr, "stderr"))
    code = await proc.wait()
    return code, out.result(), err.result()
