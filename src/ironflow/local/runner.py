"""Start a sandbox process in its own cgroup, feed it, read it, and make sure it is gone (I/O).

The one place sandbox processes start and die. Each sandbox gets its own cgroup
(:mod:`ironflow.local.cgroups`: processes, memory, CPU) and rlimits, joined before the
sandbox runtime executes, and leads its own process group. On the way out (exit,
timeout, cancellation, ``release_run``) the whole cgroup is killed and removed, and the
wait for it is shielded from the caller's cancellation: no call returns while anything
of its sandbox still runs. A sandbox is registered before its process starts, so
``release_run`` never misses one that is starting; it waits until that one is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ironflow import errors
from ironflow.local import cgroups, limits
from ironflow.provider import LogSink

__all__ = ["SandboxProcesses"]

_KILL_GRACE_S: Final = 5.0


@dataclass(eq=False)
class _Running:
    """One sandbox from registration to teardown."""

    run_ids: frozenset[str]
    proc: asyncio.subprocess.Process | None = None
    released: bool = False
    gone: asyncio.Event = field(default_factory=asyncio.Event)


class SandboxProcesses:
    """The sandboxes one provider started and that have not ended, with the run ids they
    belong to (their own run and its root run, so releasing a root takes its sub-runs).

    Args:
        support: where cgroups go on this machine (:func:`cgroups.probe`).
        sandbox_limits: what each sandbox may use.
        host_uid: on a root worker, the host uid the sandbox runtime drops to; None keeps root.
    """

    def __init__(self, support: cgroups.Support, sandbox_limits: limits.SandboxLimits, *, host_uid: int | None) -> None:
        self._running: list[_Running] = []
        self.support = support
        self.limits = sandbox_limits
        self.host_uid = host_uid
        self._rlimits = limits.rlimits(
            sandbox_limits,
            nproc="pids" not in support.controllers,
            data="memory" not in support.controllers,
        )

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
        binds: tuple[tuple[bytes, bytes], ...] = (),
    ) -> tuple[int, str, str]:
        """Exit code, stdout and stderr of ``argv``; lines go to ``sink`` as they arrive.

        Raises:
            AgentTimeout: it ran past ``limit_s`` (its cgroup is empty and gone by then).
            SandboxError: its cgroup could not be made.
        """
        entry = _Running(run_ids)
        self._running.append(entry)  # before the process exists: release_run must see it
        group: cgroups.Sandbox | None = None
        try:
            if self.support.version:
                try:
                    group = cgroups.Sandbox(self.support, self.limits)
                except OSError as exc:
                    raise errors.SandboxError(f"could not make the sandbox's cgroup: {exc.strerror}") from None
            spawn = asyncio.ensure_future(
                asyncio.create_subprocess_exec(
                    *argv,
                    env=dict(env),  # the whole sandbox environment: never on the argv
                    cwd="/",
                    stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    start_new_session=True,  # one process group to kill where there is no cgroup
                    pass_fds=pass_fds,
                    preexec_fn=cgroups.child_setup(
                        group.procs_files if group is not None else (), self._rlimits, self.host_uid, binds
                    ),
                )
            )
            try:
                entry.proc = await asyncio.shield(spawn)
            except asyncio.CancelledError:
                # Cancelled while it starts: let it start, so the teardown below kills its cgroup now
                # (asyncio's own clean-up would wait for the sandbox's pipes, i.e. for it to end).
                entry.proc = await spawn
                raise
            if entry.released:  # released while it started: it ends as killed, like the others
                _kill_group(entry.proc)
            async with asyncio.timeout(limit_s):
                return await _communicate(entry.proc, stdin, sink)
        except TimeoutError:
            raise errors.AgentTimeout(limit_s) from None
        finally:
            # Shielded: a cancelled caller still waits for the tree to be gone.
            await asyncio.shield(_teardown(entry.proc, group))
            self._running.remove(entry)
            entry.gone.set()

    async def kill_run(self, run_id: str) -> int:
        """Kill every sandbox of ``run_id`` (or of a run whose root it is), those still starting
        included, and wait until they are gone; returns how many."""
        victims = [e for e in self._running if run_id in e.run_ids and not e.released]
        for entry in victims:
            entry.released = True
            if entry.proc is not None:
                _kill_group(entry.proc)
        for entry in victims:
            await entry.gone.wait()
        return len(victims)


async def _teardown(proc: asyncio.subprocess.Process | None, group: cgroups.Sandbox | None) -> None:
    """Kill the cgroup (everything the sandbox started) or the process group, reap, remove the cgroup."""
    if proc is not None and proc.returncode is None:
        _kill_group(proc)
    if group is not None:
        await group.remove()
    if proc is not None:
        await _reap(proc)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    # bwrap/runsc lead their own process group; the cgroup kill takes what left it.
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
