"""One sandbox run to its end in this thread, without an event loop: ``ironflow exec``'s (I/O).

A command line that runs one plain command needs nothing of asyncio, whose import was a third of
that command's whole start. The run is :meth:`SandboxProcesses.run
<ironflow.local.sandbox.launch.SandboxProcesses.run>`'s, waiting here instead: its own cgroup and
rlimits before the sandbox runtime does anything (:func:`~ironflow.local.sandbox.spawn.start_blocking`),
its own process group, both pipes read to their end, the whole tree killed past the time limit,
and on every way out (its end, the limit, an exception, Ctrl-C) the cgroup killed and removed and
the process reaped before the call returns. Not for a process that runs other sandboxes at once: a
sandbox here is not registered for ``release_run``.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import replace

from ironflow import errors
from ironflow.captured import DEFAULT_KEEP_BYTES, Captured
from ironflow.local.sandbox import cgroups, launch
from ironflow.local.sandbox import spawn as sandbox_spawn

__all__ = ["run"]


def run(
    processes: launch.SandboxProcesses,
    argv: list[str],
    *,
    stdin: bytes | None,
    limit_s: float,
    pass_fds: tuple[int, ...] = (),
    binds: tuple[tuple[bytes, bytes], ...] = (),
    on_output: launch.OutputSink | None = None,
    keep_bytes: int = DEFAULT_KEEP_BYTES,
) -> launch.Finished:
    """How ``argv`` ended, as :meth:`SandboxProcesses.run` says it (without its log sink and stop
    condition); the raw pieces of output go to ``on_output`` as they arrive.

    Raises:
        SandboxError: its cgroup could not be made, or its first process not put in it.
    """
    if processes.containers is not None:
        raise errors.SandboxError("a container daemon's sandbox runs on the event loop, not blocking")
    group = processes.new_group()
    out = Captured("stdout", keep_bytes=keep_bytes)
    err = Captured("stderr", keep_bytes=keep_bytes)
    proc: subprocess.Popen[bytes] | None = None
    terminated = _end_on_sigterm()
    try:
        proc = sandbox_spawn.start_blocking(
            argv,
            group=group,
            pairs=processes.rlimits,
            host_uid=processes.host_uid,
            binds=binds,
            env=launch.RUNTIME_ENV,  # the sandbox's own is in its argv's gate
            pass_fds=pass_fds,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + limit_s
        code = _exit_code(proc, deadline) if _communicate(proc, stdin, out, err, on_output, deadline) else None
        if code is not None:
            # Read before the teardown removes the cgroup: its counters go with it.
            memory_kills = group.memory_kills() if group is not None else 0
            return replace(launch.Finished.of(code, out, err), memory_kills=memory_kills)
        _kill_tree(proc, group)  # past the limit: what it wrote up to the end of its pipes is kept
        _communicate(proc, None, out, err, on_output, time.monotonic() + launch.KILL_GRACE_S)
        return launch.Finished.of(-signal.SIGKILL, out, err, timed_out=True)
    finally:
        # Ctrl-C or a termination request waits until the sandbox is gone.
        masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            _teardown(proc, group)
            if terminated:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)


def _end_on_sigterm() -> bool:
    """SIGTERM ends the run as Ctrl-C does, through the teardown (exit 143), where nothing else
    handles it: by default it ended this process at once and left the sandbox's cgroup behind.
    False where it is not this call's to set (another thread, a handler of the program's own)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _terminate)
    return True


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _communicate(
    proc: subprocess.Popen[bytes],
    stdin: bytes | None,
    out: Captured,
    err: Captured,
    on_output: launch.OutputSink | None,
    deadline: float,
) -> bool:
    """Feed ``stdin`` and read both pipes into ``out`` and ``err`` until they end (True) or until
    ``deadline`` (False: what was read is kept)."""
    with selectors.DefaultSelector() as selector:
        for stream, name, kept in ((proc.stdout, "stdout", out), (proc.stderr, "stderr", err)):
            if stream is not None and not stream.closed:
                selector.register(stream, selectors.EVENT_READ, (name, kept))
        pending = memoryview(stdin or b"")
        if proc.stdin is not None and not proc.stdin.closed:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                selector.register(proc.stdin, selectors.EVENT_WRITE, None)
            else:
                proc.stdin.close()
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in selector.select(left):
                if key.data is None:  # stdin takes more
                    try:
                        pending = pending[os.write(key.fd, pending[: launch.READ_BYTES]) :]
                    except (BrokenPipeError, ConnectionResetError):
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(key.fileobj)
                        assert proc.stdin is not None
                        with contextlib.suppress(BrokenPipeError):
                            proc.stdin.close()
                    continue
                name, kept = key.data
                data = os.read(key.fd, launch.READ_BYTES)
                if not data:
                    selector.unregister(key.fileobj)
                    continue
                kept.feed(data)
                if on_output is not None:
                    on_output(name, data)
    return True


def _exit_code(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    """Its exit code, or None if it still runs at ``deadline`` (it closed its pipes, not its life)."""
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def _kill_tree(proc: subprocess.Popen[bytes], group: cgroups.SandboxCgroup | None) -> None:
    """Kill the process group (the runtime leads its own) and the cgroup (everything it started)."""
    if proc.poll() is None:
        launch.kill_group(proc.pid)
    if group is not None:
        group.kill_blocking()


def _teardown(proc: subprocess.Popen[bytes] | None, group: cgroups.SandboxCgroup | None) -> None:
    """Kill what is left, reap, close the pipes, remove the cgroup; without one, wait (bounded) until
    no process of the group is alive."""
    if proc is not None and proc.poll() is None:
        launch.kill_group(proc.pid)
    if group is not None:
        group.remove_blocking()
    if proc is None:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=launch.KILL_GRACE_S)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    if group is None:
        deadline = time.monotonic() + launch.KILL_GRACE_S
        while launch.alive_in_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
