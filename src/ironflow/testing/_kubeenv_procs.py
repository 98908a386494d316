"""The real control plane's processes: start each in its own process group, wait until ready, kill every group.

Every component dies with the thread that started it (``PR_SET_PDEATHSIG``), so a crashed
or killed test run leaves nothing behind; :meth:`Processes.stop` kills the groups (children
included) itself. A component that exits while the cluster waits on it fails the wait with
the tail of its log.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["KubeEnvError", "Processes", "die_with_parent"]

START_TIMEOUT_S: Final = 120.0
_STOP_GRACE_S: Final = 2.0  # kube-apiserver drains watches for far longer; test data need no drain
_PR_SET_PDEATHSIG: Final = 1


class KubeEnvError(RuntimeError):
    """A component did not start or an admin request failed; the message names the component
    and the tail of its log."""


def die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the thread that started it exits (Linux), so a
    crashed or killed test run leaves no component behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Processes:
    """The running components, started from ``bin_dir``, newest last."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self._procs: list[_Proc] = []

    def __len__(self) -> int:
        return len(self._procs)

    @property
    def pids(self) -> list[int]:
        """Process ids (each the leader of its own process group) of the running components."""
        return [p.popen.pid for p in self._procs]

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        cwd: Path,
        log_dir: Path,
        exe: str | None = None,
        prefix: Sequence[str] = (),
        setup: Callable[[], None] | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        """Start binary ``name`` (or ``exe``) with ``args``, its output to ``log_dir/<name>.log``.

        ``prefix`` goes before the binary (``nsenter …`` for the real node), ``setup`` runs in the
        child before exec (joining the node's cgroup: only writes, safe between fork and exec)."""
        log = log_dir / f"{name}.log"

        def before_exec() -> None:
            die_with_parent()
            if setup is not None:
                setup()

        with open(log, "wb") as out:
            popen = subprocess.Popen(
                [*prefix, exe or str(self.bin_dir / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=None if env is None else dict(env),
                pass_fds=tuple(pass_fds),
                start_new_session=True,  # its own process group: stop() kills it and its children
                preexec_fn=before_exec,  # a prctl call and cgroup writes: safe between fork and exec
            )
        self._procs.append(_Proc(name, popen, log))

    @contextlib.contextmanager
    def stopped(self, name: str) -> Iterator[None]:
        """Component ``name`` held stopped (SIGSTOP to its process group) for the block, then let
        go: what it watches piles up meanwhile, as behind a slow controller."""
        group = next(p.popen.pid for p in self._procs if p.name == name)
        os.killpg(group, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(group, signal.SIGCONT)

    def wait(self, ready: Callable[[], object], component: str, what: str, timeout: float = START_TIMEOUT_S) -> None:
        """Poll ``ready`` until it is true; fail when any component exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while True:
            for proc in self._procs:
                if proc.popen.poll() is not None:
                    raise KubeEnvError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}")
            with contextlib.suppress(OSError, KubeEnvError, ValueError):
                if ready():
                    return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {p.name}\n{p.tail(8)}" for p in self._procs if p.name == component)
                raise KubeEnvError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM every process group (newest first), then SIGKILL what is left."""
        for proc in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + _STOP_GRACE_S
        for proc in reversed(self._procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)  # the group: children die too
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
        self._procs.clear()
