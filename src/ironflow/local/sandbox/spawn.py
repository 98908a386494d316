"""Start a sandbox's first process inside its cgroup and rlimits, without code between fork and exec (I/O).

bubblewrap is started gated: its argv opens with ``--args GATE``, a pipe it reads to the end
before it does anything else. It is spawned with no ``preexec_fn`` (so CPython can vfork
instead of copying the worker's memory); this process then writes it into its
cgroup and sets its rlimits (``prlimit``), and only then writes the gate's content and closes it.
The content holds the user namespace the argv's flags require (:func:`bwrap.gate_args`), so a
gate closed early (this process died, or the setup failed and it is killed) never lets a sandbox
run outside its cgroup: bubblewrap refuses the argv.

On a root worker the sandbox runs as the host uid, and without ``CAP_SYS_RESOURCE`` no ``prlimit``
reaches a process of another uid: the sandbox's first process sets itself up as root, then drops.
That is ``ironflow-enter`` (``enter.c``, built into the environment by ``scripts/install``: one
small exec that writes itself into its cgroup, stages the bind sources a session's bubblewrap reads
under a 0700 home in a private mount namespace (:mod:`~ironflow.local.sandbox.identity`), sets its
rlimits, drops to the host uid and executes bubblewrap, whose gate this process opens at once);
without it, bash and ``setpriv``, two execs and
about 2.5 ms more of every start. The gated process is then bash, still root (:data:`_ROOT_WAIT`). It
writes itself into its cgroup (on cgroup v1 a thread that moves itself skips the wait for an RCU
grace period that a pid written by another process costs, 5-13 ms here), says so, and waits on a
second gate while this process sets its rlimits; then ``setpriv`` drops it and executes bubblewrap,
whose own gate this process opens once bash said it joined (meanwhile: off the start's path).
``runsc`` (gVisor) reads no gate: ``ironflow-enter`` sets it up the same way before it executes it (its
cgroup, its rlimits, on a root worker the uid drop) and, for a session, asks for SIGKILL once the
worker dies (``runsc run`` has no ``--die-with-parent``). Without ``ironflow-enter``, runsc, bubblewrap
with bind sources to stage, and bubblewrap that finds no ``setpriv`` or bash set themselves up between
fork and exec (:func:`cgroups.child_setup`): a fork of the worker's whole memory, no vfork.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ironflow import _lazy, errors
from ironflow.local.sandbox import cgroups, identity

if TYPE_CHECKING:
    import asyncio
else:
    asyncio = _lazy.module("asyncio")  # :func:`start_blocking` runs without it

__all__ = ["ENTER_FAILED", "ENTER_SOURCE", "Gate", "enter_binary", "start", "start_blocking"]

#: A root worker's gated sandbox, as root in bash (dash takes no fd past 9; in reach of ``prlimit`` without
#: ``CAP_SYS_RESOURCE``): it writes itself into the ``$1`` cgroup files that follow, says so on its ready fd,
#: waits for a line on its gate fd, then drops to the host uid through ``setpriv`` and executes
#: bubblewrap; a failed write, or a gate closed without the line, ends it (125) before anything ran.
_ROOT_WAIT: Final = (
    'n=$1; shift; while ((n-- > 0)); do echo 0 >"$1" || exit 125; shift; done; '
    'echo >&{ready}; exec {ready}>&-; read -r _ <&{fd} || exit 125; exec {fd}<&- "$@"'
)


#: The first process's C source, and where ``scripts/install`` builds it and keeps the source it built from.
ENTER_SOURCE: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enter.c")
_ENTER_DIR: Final = os.path.join(sys.prefix, "libexec", "ironflow")
#: How its one line starts when it could not set the sandbox up (exit 125, before bubblewrap ran).
ENTER_FAILED: Final = "ironflow-enter: "
#: The most bind sources ironflow-enter stages (enter.c's MAX_STAGED); past it, the setup between fork and exec.
MAX_STAGED: Final = 256


@functools.cache
def enter_binary() -> str | None:
    """``ironflow-enter`` as built from this package's ``enter.c``, or None (not built, or from another
    version of the source: a checkout pulled since its install), when bash and ``setpriv`` stand in."""
    binary = os.path.join(_ENTER_DIR, "ironflow-enter")
    try:
        with open(ENTER_SOURCE, "rb") as ours, open(binary + ".c", "rb") as built:
            same = ours.read() == built.read()
    except OSError:
        return None
    return binary if same and os.access(binary, os.X_OK) else None


#: The gates not yet closed, by the fd bubblewrap reads them from: whoever starts a process that
#: inherits that fd releases its gate (the callers hand on fds, not gates).
_OPEN: dict[int, Gate] = {}


class Gate:
    """The write end of a gated bubblewrap's ``--args`` pipe and what it is released with; this
    process's own (close-on-exec), closed once released or given up."""

    def __init__(self, data: bytes) -> None:
        self.read_fd, self._write_fd = os.pipe()  # both close-on-exec: the read end goes by pass_fds
        self._data = data
        _OPEN[self.read_fd] = self

    def release(self) -> None:
        """Write the content and close, so bubblewrap reads it to its end (blocking: a thread's)."""
        try:
            self._write()
        finally:
            self.close()

    def release_now(self) -> bool:
        """Write the content and close if the pipe takes it all without waiting (a gate's content is
        far below a pipe's 64 KiB unless the environment is large): no thread to start. False, with
        the rest kept for :meth:`release`, when it would wait."""
        os.set_blocking(self._write_fd, False)
        try:
            self._write()
        except BlockingIOError:
            os.set_blocking(self._write_fd, True)
            return False
        self.close()
        return True

    def _write(self) -> None:
        """Write what is left of the content; what a failed write left stays for the next call."""
        view = memoryview(self._data)
        try:
            while view:
                view = view[os.write(self._write_fd, view) :]
        finally:
            self._data = bytes(view)

    def close(self) -> None:
        """Close both ends (idempotent); a gate closed unreleased makes bubblewrap refuse its argv."""
        if _OPEN.get(self.read_fd) is self:
            del _OPEN[self.read_fd]
        for name in ("read_fd", "_write_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)


def _join(
    pid: int,
    procs_files: tuple[bytes, ...],
    pairs: tuple[tuple[int, int], ...],
    gates: tuple[Gate | None, Gate],
    ready: int | None = None,
) -> None:
    """Put the gated process ``pid`` in its cgroup and rlimits, then open bubblewrap's gate (a thread's: a
    cgroup v1 move waits out an RCU grace period, milliseconds the event loop should not stall). A root
    worker's bash joins by itself: its own gate opens once its rlimits are set, bubblewrap's once it
    said on ``ready`` that it joined, so neither wait holds up bash, which starts setpriv meanwhile."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)
    for which, value in pairs:
        resource.prlimit(pid, which, (value, value))
    waiting, gate = gates
    if waiting is not None:
        with contextlib.suppress(BrokenPipeError):  # it ended without joining: ``ready`` says so
            waiting.release()  # its rlimits are set: once it has joined, it may go on to bubblewrap's gate
    if ready is not None and os.read(ready, 1) != b"\n":  # it ended (125) without joining
        raise OSError(errno.EIO, "its first process could not write itself into its cgroup")
    gate.release()


class _Plan:
    """How one first process starts: its argv and fds, what runs between fork and exec, and the gates
    this process opens once it runs (see :func:`start`). A plain class: a dataclass costs a
    millisecond at import, on every ``ironflow exec``."""

    __slots__ = ("argv", "gate", "gated", "options", "pass_fds", "procs_files", "ready", "waiting")

    def __init__(
        self,
        argv: list[str],
        *,
        group: cgroups.SandboxCgroup | None,
        pairs: tuple[tuple[int, int], ...],
        host_uid: int | None,
        binds: tuple[tuple[bytes, bytes], ...],
        pass_fds: tuple[int, ...],
        die_with_parent: bool,
    ) -> None:
        procs_files = group.procs_files if group is not None else ()
        join_files = group.join_files if group is not None else ()
        self.gate = gate = next((_OPEN[fd] for fd in pass_fds if fd in _OPEN), None)
        self.options: dict[str, Any] = {}
        self.waiting: Gate | None = None  # a root worker's: the gate bash waits on before it drops its uid
        self.ready: tuple[int, int] | None = None  # and the pipe it says it joined its cgroup on
        root_gated = gate is not None and host_uid is not None
        setup = bool(join_files or pairs or host_uid is not None or die_with_parent)  # else it starts as it is
        enter = enter_binary() if (root_gated or (gate is None and setup)) and len(binds) <= MAX_STAGED else None
        # bash and setpriv stage no bind: with binds, the setup runs between fork and exec.
        bashed = root_gated and enter is None and not binds
        setpriv, bash = (shutil.which("setpriv"), shutil.which("bash")) if bashed else (None, None)
        entered = False  # set up by ironflow-enter: nothing between fork and exec, no gate but bubblewrap's
        joins = [str(len(join_files)), *map(os.fsdecode, join_files)]  # either first process's cgroup files
        if enter is not None:
            staged = binds if host_uid is not None else ()  # staged by root only, as child_setup does
            staging = [str(len(staged)), *([identity.STAGE_ROOT] if staged else [])]
            staging += [os.fsdecode(name) for pair in staged for name in pair]
            limits = [str(len(pairs)), *(str(number) for pair in pairs for number in pair)]
            uid = "-" if host_uid is None else str(host_uid)  # "-": a worker that is not root keeps its own
            parent = str(os.getpid()) if die_with_parent else "0"
            argv = [enter, *joins, *staging, *limits, uid, uid, parent, "--", *argv]
            procs_files, entered = (), True
        elif setpriv is not None and bash is not None and host_uid is not None:
            self.waiting = Gate(b"\n")
            self.ready = os.pipe()
            uid = str(host_uid)
            drop = [setpriv, "--reuid", uid, "--regid", uid, "--clear-groups", "--"]
            script = _ROOT_WAIT.format(ready=self.ready[1], fd=self.waiting.read_fd)
            argv = [bash, "-c", script, "ironflow-gate", *joins, *drop, *argv]
            pass_fds, procs_files = (*pass_fds, self.waiting.read_fd, self.ready[1]), ()
        # Staged binds need root between fork and exec (a private mount namespace), before the uid drop.
        self.gated = gate is not None and (host_uid is None or self.waiting is not None)
        if not self.gated and not entered and setup:
            self.options["preexec_fn"] = cgroups.child_setup(join_files, pairs, host_uid, binds, die_with_parent)
        self.argv, self.pass_fds, self.procs_files = argv, pass_fds, procs_files

    def process_options(self, env: Mapping[str, str], stdin: int, stdout: int, stderr: int) -> dict[str, Any]:
        """How the process is started, but its argv: for ``subprocess.Popen`` or asyncio's twin."""
        return {
            "env": dict(env),
            "cwd": "/",
            "stdin": stdin,
            "stdout": stdout,
            "stderr": stderr,
            "start_new_session": True,  # one process group to kill where there is no cgroup
            "pass_fds": self.pass_fds,
            **self.options,
        }

    def started(self) -> None:
        """The process was started (or could not be): bash's end of its ready pipe is bash's alone."""
        if self.ready is not None:
            os.close(self.ready[1])

    def join(self, pid: int, pairs: tuple[tuple[int, int], ...]) -> None:
        """Put the gated process in its cgroup and rlimits and open its gate (blocking: :func:`_join`)."""
        assert self.gate is not None
        _join(pid, self.procs_files, pairs, (self.waiting, self.gate), None if self.ready is None else self.ready[0])

    def close(self) -> None:
        if self.waiting is not None:
            self.waiting.close()
        if self.ready is not None:
            os.close(self.ready[0])


async def start(
    argv: list[str],
    *,
    group: cgroups.SandboxCgroup | None,
    pairs: tuple[tuple[int, int], ...],
    host_uid: int | None,
    binds: tuple[tuple[bytes, bytes], ...],
    env: Mapping[str, str],
    pass_fds: tuple[int, ...],
    stdin: int,
    stdout: int,
    stderr: int,
    die_with_parent: bool = False,
) -> asyncio.subprocess.Process:
    """``argv`` started in ``group`` with the rlimits ``pairs``, leading its own process group;
    gated when it inherits a :class:`Gate`'s fd, else set up by ``ironflow-enter`` or, without it,
    between fork and exec (see the module's docstring). ``die_with_parent``: SIGKILL for it once this
    process dies (``runsc run`` has no ``--die-with-parent``; bubblewrap has its own flag).

    Raises:
        SandboxError: the gated process could not be put in its cgroup or rlimits (it is killed);
            ``ironflow-enter`` instead ends with exit 125 and its one line, which
            :func:`~ironflow.local.sandbox.argv.raise_if_sandbox_failed` tells from the step's own.
    """
    plan = _Plan(
        argv, group=group, pairs=pairs, host_uid=host_uid, binds=binds, pass_fds=pass_fds,
        die_with_parent=die_with_parent,
    )  # fmt: skip
    try:
        try:
            proc = await asyncio.create_subprocess_exec(*plan.argv, **plan.process_options(env, stdin, stdout, stderr))
        finally:
            plan.started()
        gate = plan.gate
        if gate is None:
            return proc
        loop = asyncio.get_running_loop()
        if not plan.gated:  # set up in the child or by ironflow-enter: the gate only carries the content
            if not gate.release_now():  # a large environment: the rest from a thread, as bubblewrap reads
                await asyncio.shield(loop.run_in_executor(None, gate.release))
            return proc
        joined = loop.run_in_executor(None, plan.join, proc.pid, pairs)
        try:
            await asyncio.shield(joined)
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                await joined  # the thread holds the gates until it is done with them
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)  # at its gate, or refused by it: nothing of the sandbox ran
            gate.close()
            await asyncio.shield(proc.wait())
            if isinstance(exc, OSError):
                raise _not_joined(exc) from None
            raise
        return proc
    finally:
        plan.close()


def start_blocking(
    argv: list[str],
    *,
    group: cgroups.SandboxCgroup | None,
    pairs: tuple[tuple[int, int], ...],
    host_uid: int | None,
    binds: tuple[tuple[bytes, bytes], ...],
    env: Mapping[str, str],
    pass_fds: tuple[int, ...],
    stdin: int,
    stdout: int,
    stderr: int,
) -> subprocess.Popen[bytes]:
    """:func:`start`, waiting in this thread: for a process that runs one sandbox and nothing else
    (``ironflow exec``), which then needs no event loop."""
    plan = _Plan(
        argv, group=group, pairs=pairs, host_uid=host_uid, binds=binds, pass_fds=pass_fds, die_with_parent=False
    )
    try:
        try:
            proc = subprocess.Popen(plan.argv, **plan.process_options(env, stdin, stdout, stderr))
        finally:
            plan.started()
        gate = plan.gate
        if gate is None:
            return proc
        if not plan.gated:
            gate.release()
            return proc
        try:
            plan.join(proc.pid, pairs)
        except BaseException as exc:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            gate.close()
            proc.wait()
            if isinstance(exc, OSError):
                raise _not_joined(exc) from None
            raise
        return proc
    finally:
        plan.close()


def _not_joined(exc: OSError) -> errors.SandboxError:
    return errors.SandboxError(f"could not put the sandbox in its cgroup and limits: {exc.strerror}")
