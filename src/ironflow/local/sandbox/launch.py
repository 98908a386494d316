"""Start a sandbox process in its own cgroup, feed it, read it, and make sure it is gone (I/O).

Where sandbox processes start and die. Each sandbox gets its own cgroup
(:mod:`ironflow.local.sandbox.cgroups`: processes, memory, CPU) and rlimits, joined before the
sandbox runtime does anything (:mod:`~ironflow.local.sandbox.spawn`), and leads its own
process group. On the way out (exit,
timeout, cancellation, ``release_run``) the whole cgroup is killed and removed, and the
wait for it is shielded from the caller's cancellation: no call returns while anything
of its sandbox still runs. A sandbox is registered before its process starts, so
``release_run`` never misses one that is starting; it waits until that one is gone. Its blocking
twin for a process that runs one plain command and nothing else (``ironflow exec``, without an
event loop) is :mod:`~ironflow.local.sandbox.blocking_run`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from ironflow import _lazy, errors
from ironflow.captured import DEFAULT_KEEP_BYTES, Captured, SinkLines
from ironflow.local.sandbox import cgroups, limits
from ironflow.local.sandbox import spawn as sandbox_spawn
from ironflow.provider import LogSink

log = logging.getLogger("ironflow.local")

#: Called with ``("stdout" | "stderr", bytes)`` for each piece of output as it is read.
OutputSink = Callable[[str, bytes], None]


if TYPE_CHECKING:
    import asyncio

    from ironflow.steps import StepScope
else:
    asyncio = _lazy.module("asyncio")  # ``ironflow exec`` runs its sandbox without it (blocking_run)

__all__ = [
    "KILL_GRACE_S",
    "READ_BYTES",
    "RUNTIME_ENV",
    "Containers",
    "Finished",
    "SandboxProcesses",
    "alive_in_group",
    "kill_group",
    "kill_tree",
    "reap",
    "teardown",
    "within_file_table",
]

#: The whole environment of the sandbox runtime's own host process (bwrap, runsc, gVisor's relay),
#: whatever the sandbox's: that process runs on the host before any confinement, so a step's
#: variable there (``LD_PRELOAD``) ran in the host's network namespace. The sandbox's environment
#: goes in apart (``bwrap --args``, gVisor's OCI spec).
RUNTIME_ENV: Final[Mapping[str, str]] = types.MappingProxyType(
    {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
)

#: How long a killed sandbox is waited for (reaped, its pipes read to their end) before the call goes on.
KILL_GRACE_S: Final = 5.0
#: The most of a pipe read at once.
READ_BYTES: Final = 1 << 16


class Containers(Protocol):
    """A container daemon whose client is the sandbox's process (``docker run``): the daemon holds
    the limits and the container outlives a killed client, so each one is read and removed here."""

    @property
    def env(self) -> Mapping[str, str]:
        """The whole environment of the daemon's client (the worker's own Docker variables)."""

    def container_in(self, argv: list[str]) -> str | None: ...

    async def memory_killed(self, name: str) -> bool: ...

    async def remove(self, name: str) -> None: ...


@dataclass(frozen=True)
class Finished:
    """How a sandbox ended: its exit code and output, or killed past its time limit
    (``timed_out``) or for the reason in ``stopped``, with what it wrote until then; ``memory_kills``
    counts its processes the kernel killed at its memory limit. The output is bounded
    (:class:`~ironflow.captured.Captured`): ``*_bytes`` say how much was written, ``*_cut``
    how much of it is not in ``stdout``/``stderr`` (a marker line stands there)."""

    code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_cut: int = 0
    stderr_cut: int = 0
    stopped: str | None = None
    memory_kills: int = 0

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """``stdout_bytes``, ``stderr_bytes``, ``stdout_cut``, ``stderr_cut``: a result's last fields."""
        return self.stdout_bytes, self.stderr_bytes, self.stdout_cut, self.stderr_cut

    @classmethod
    def of(
        cls, code: int, out: Captured, err: Captured, *, timed_out: bool = False, stopped: str | None = None
    ) -> Finished:
        return cls(code, out.value(), err.value(), timed_out, out.total, err.total, out.cut, err.cut, stopped)


@dataclass(eq=False)
class _Running:
    """One sandbox from registration to teardown."""

    run_ids: frozenset[str]
    proc: asyncio.subprocess.Process | None = None
    group: cgroups.SandboxCgroup | None = None
    released: bool = False
    gone: asyncio.Event = field(default_factory=lambda: asyncio.Event())


class SandboxProcesses:
    """The sandboxes one provider started and that have not ended, with the run ids they
    belong to (their own run and its root run, so releasing a root takes its sub-runs).

    Args:
        support: where cgroups go on this machine (:func:`cgroups.probe`).
        sandbox_limits: what each sandbox may use.
        host_uid: on a root worker, the host uid the sandbox runtime drops to; None keeps root.
        gvisor: the first process is ``runsc`` (:func:`limits.rlimits`).
        containers: the first process is a container daemon's client: no cgroup and no rlimit of its
            own (the daemon holds the sandbox's), and its container is removed after it.
    """

    def __init__(
        self,
        support: cgroups.Support,
        sandbox_limits: limits.SandboxLimits,
        *,
        host_uid: int | None,
        gvisor: bool = False,
        containers: Containers | None = None,
    ) -> None:
        self._running: list[_Running] = []
        self.support = support
        self.limits = sandbox_limits
        self.host_uid = host_uid
        self._gvisor = gvisor
        self.containers = containers
        #: The rlimits each sandbox's first process gets (none for a container daemon's client).
        self.rlimits = (
            ()
            if containers is not None
            else limits.rlimits(
                sandbox_limits,
                nproc="pids" not in support.controllers,
                data="memory" not in support.controllers,
                gvisor=gvisor,
            )
        )

    def new_group(self, *, kept: bool = False) -> cgroups.SandboxCgroup | None:
        """A fresh cgroup for one sandbox (``kept``: a session's that may outlive this process); None
        with no cgroups here, or where a container daemon holds its limits.

        Raises:
            SandboxError: it could not be made.
        """
        if not self.support.version or self.containers is not None:
            return None
        try:
            return cgroups.SandboxCgroup(self.support, self.limits, kept=kept)
        except OSError as exc:
            raise errors.SandboxError(f"could not make the sandbox's cgroup: {exc.strerror}") from None

    async def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | None,
        limit_s: float,
        sink: LogSink | None,
        run_ids: frozenset[str] = frozenset(),
        pass_fds: tuple[int, ...] = (),
        binds: tuple[tuple[bytes, bytes], ...] = (),
        on_output: OutputSink | None = None,
        keep_bytes: int = DEFAULT_KEEP_BYTES,
        stop_when: Callable[[], Awaitable[str]] | None = None,
    ) -> Finished:
        """How ``argv`` ended; lines go to ``sink`` and the raw pieces to ``on_output`` as they arrive;
        the result keeps ``keep_bytes`` of each stream's start and end. Past ``limit_s``, or once
        ``stop_when()`` returns a reason, the whole tree is killed and what it wrote until then is
        kept (``timed_out``, or the reason in ``stopped``): the caller says what that means for it.

        Raises:
            SandboxError: its cgroup could not be made.
        """
        entry = _Running(run_ids)
        self._running.append(entry)  # before the process exists: release_run must see it
        group: cgroups.SandboxCgroup | None = None
        out = Captured("stdout", keep_bytes=keep_bytes)
        err = Captured("stderr", keep_bytes=keep_bytes)
        reading: asyncio.Task[int] | None = None
        guard: asyncio.Future[str] | None = None
        container = self.containers.container_in(argv) if self.containers is not None else None
        try:
            group = entry.group = self.new_group()
            spawn = asyncio.ensure_future(
                sandbox_spawn.start(
                    argv,
                    group=group,
                    pairs=self.rlimits,
                    host_uid=self.host_uid,
                    binds=binds,
                    # The sandbox's own is in its argv's gate, gVisor's spec or Docker's env file.
                    env=RUNTIME_ENV if self.containers is None else self.containers.env,
                    pass_fds=pass_fds,
                    stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
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
                await kill_tree(entry.proc, group)
            reading = asyncio.ensure_future(_communicate(entry.proc, stdin, sink, out, err, on_output))
            waits: set[asyncio.Future[Any]] = {reading}
            if stop_when is not None:
                guard = asyncio.ensure_future(stop_when())
                waits.add(guard)
            done, _ = await asyncio.wait(waits, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
            if reading in done:
                code = reading.result()
                # Read before the teardown removes the cgroup: its counters go with it.
                memory_kills = group.memory_kills() if group is not None else 0
                if container is not None and self.containers is not None:
                    memory_kills = int(await self.containers.memory_killed(container))
                if self._gvisor:  # a kernel that died for want of host tasks says so last, without runsc's dump
                    died = _gvisor_death(code, out, err, self.limits.pids, group)
                    if died is not None:
                        return replace(died, memory_kills=memory_kills)
                return replace(Finished.of(code, out, err), memory_kills=memory_kills)
            # Past the limit or stopped: kill the tree, then read what it wrote up to the end of its pipes.
            stopped = guard.result() if guard is not None and guard in done else None
            await kill_tree(entry.proc, group)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(KILL_GRACE_S):
                    await reading
            return Finished.of(-signal.SIGKILL, out, err, timed_out=stopped is None, stopped=stopped)
        finally:
            for task in (reading, guard):
                if task is not None:
                    task.cancel()  # a no-op once it ended; else the caller was cancelled
            # Shielded: a cancelled caller still waits for the tree to be gone.
            await asyncio.shield(teardown(entry.proc, group))
            if container is not None and self.containers is not None:  # a killed client left it running
                await asyncio.shield(self.containers.remove(container))
            self._running.remove(entry)
            entry.gone.set()

    async def kill_run(self, run_id: str) -> int:
        """Kill every sandbox of ``run_id`` (or of a run whose root it is), those still starting
        included, and wait until they are gone; returns how many."""
        victims = [e for e in self._running if run_id in e.run_ids and not e.released]
        for entry in victims:
            entry.released = True
            if entry.proc is not None:
                kill_group(entry.proc.pid)
        for entry in victims:
            if entry.proc is not None:
                # The whole tree, as a teardown kills it: the sandbox's own processes are in a
                # session of their own (bwrap --new-session), out of reach of the group kill, and
                # bwrap's --die-with-parent alone let them outlive the release (once in a soak run).
                await kill_tree(entry.proc, entry.group)
        for entry in victims:
            await entry.gone.wait()
        return len(victims)


def _gvisor_death(
    code: int, out: Captured, err: Captured, pids: int, group: cgroups.SandboxCgroup | None
) -> Finished | None:
    """How a gVisor sandbox ended whose kernel died for want of host tasks: runsc's first words and
    ironflow's line (:func:`gvisor.kernel_death`), not Go's goroutine dump; None after any other end."""
    from ironflow.local.sandbox import gvisor  # gVisor's runs only: a bubblewrap run never loads it

    refused = group.task_refusals() if group is not None else 0
    death = gvisor.kernel_death(code, err.value(), pids, refused)
    if not death:
        return None
    words = gvisor.kernel_death_words(err.value(), death)
    cut = max(0, err.total - gvisor.DEATH_WORDS_BYTES)
    return Finished(code, out.value(), words, False, out.total, err.total, out.cut, cut)


def within_file_table(sandbox_limits: limits.SandboxLimits, *, host_processes: bool) -> limits.SandboxLimits:
    """``sandbox_limits`` within a share of this host's ``fs.file-max`` (:func:`limits.within_file_max`)
    where each sandbox process is a host process (bubblewrap); unchanged where they live in a kernel of
    their own behind a few host processes (gVisor's runsc, each bound by ``open_files`` already)."""
    if not host_processes:
        return sandbox_limits
    try:
        with open("/proc/sys/fs/file-max") as f:
            file_max: int | None = int(f.read())
    except (OSError, ValueError):
        file_max = None
    bounded = limits.within_file_max(sandbox_limits, file_max)
    if bounded != sandbox_limits:
        log.info(
            "sandbox open files per process: %d (x %d processes, within a share of fs.file-max %s)",
            bounded.open_files, bounded.pids, file_max,
        )  # fmt: skip
    return bounded


def step_key(scope: StepScope) -> str:
    """What a step's sandboxes are killed by on ``release_step`` (NUL: in no run id or step name)."""
    return f"{scope.run_id}\0{scope.step}"


def release_keys(scope: StepScope | None) -> frozenset[str]:
    """The keys :meth:`SandboxProcesses.kill_run` kills a step's sandboxes by: its run, its root
    run, and the step itself."""
    if scope is None:
        return frozenset()
    return frozenset((*(i for i in (scope.run_id, scope.root_run_id) if i), step_key(scope)))


async def kill_tree(proc: asyncio.subprocess.Process | None, group: cgroups.SandboxCgroup | None) -> None:
    """Kill the cgroup (everything the sandbox started) and the process group."""
    if proc is not None and proc.returncode is None:
        kill_group(proc.pid)
    if group is not None:
        await group.kill()


async def teardown(proc: asyncio.subprocess.Process | None, group: cgroups.SandboxCgroup | None) -> None:
    """Kill the cgroup (everything the sandbox started) or the process group, reap, remove the cgroup."""
    if proc is not None and proc.returncode is None:
        kill_group(proc.pid)
    if group is not None:
        await group.remove()
    if proc is not None:
        await reap(proc)
        if group is None:
            await _group_gone(proc.pid)


async def _group_gone(pgid: int) -> None:
    """Wait (bounded) until no process of the group is alive: a SIGKILL is delivered, not done,
    when ``killpg`` returns, and a child that held the pipes may still be exiting after they close.
    Each one is waited for on a pidfd (readable once it has exited), not polled."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(KILL_GRACE_S):
            for pid in alive_in_group(pgid):
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue  # already gone
                try:
                    ended: asyncio.Future[None] = loop.create_future()
                    loop.add_reader(fd, _settle, ended)
                    try:
                        await ended
                    finally:
                        loop.remove_reader(fd)
                finally:
                    os.close(fd)


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)


def alive_in_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still alive (a zombie is dead, only not yet reaped)."""
    alive = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone while looked at
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            alive.append(int(entry.name))
    return alive


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (bwrap's, runsc's); the cgroup kill takes what left it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def reap(proc: asyncio.subprocess.Process) -> None:
    """Wait (bounded) until a killed process (a sandbox, a container daemon's client) is reaped.
    asyncio's wait() returns only once its pipes are closed too, and a pipe whose unread output
    filled the reader's buffer is never read to its end: what nobody reads is read and dropped meanwhile."""
    streams = (s for s in (proc.stdout, proc.stderr) if s is not None)
    with contextlib.suppress(TimeoutError, ProcessLookupError):
        async with asyncio.timeout(KILL_GRACE_S):
            await asyncio.gather(proc.wait(), *map(_drop_rest, streams))


async def _drop_rest(stream: asyncio.StreamReader) -> None:
    # RuntimeError: another task reads it (a session's watch), to its end; OSError: the pipe broke, nothing is left.
    with contextlib.suppress(RuntimeError, OSError):
        while await stream.read(READ_BYTES):
            pass


async def _communicate(
    proc: asyncio.subprocess.Process,
    stdin: bytes | None,
    sink: LogSink | None,
    out: Captured,
    err: Captured,
    on_output: OutputSink | None = None,
) -> int:
    """Feed ``stdin``, read both pipes to their end into ``out`` and ``err`` (kept by the caller,
    so a timeout keeps what was read), and return the exit code."""
    assert proc.stdout is not None
    assert proc.stderr is not None

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin or b"")
            await proc.stdin.drain()
        proc.stdin.close()

    async def read(stream: asyncio.StreamReader, name: str, kept: Captured) -> None:
        # Chunks, not readline: a line longer than the reader's buffer is still only output.
        lines = None if sink is None else SinkLines(name, sink.log)
        while data := await stream.read(READ_BYTES):
            kept.feed(data)
            if on_output is not None:
                on_output(name, data)
            if lines is not None:
                lines.feed(data)
        if lines is not None:
            lines.end()

    async with asyncio.TaskGroup() as group:
        group.create_task(feed())
        group.create_task(read(proc.stdout, "stdout", out))
        group.create_task(read(proc.stderr, "stderr", err))
    return await proc.wait()
