"""The real node's cgroup: one path in every hierarchy, holding the node and all its pods (I/O).

Why one cgroup for everything: containerd's shims and the containers they start leave the process
groups the test started (they daemonize), so killing process groups cannot stop a node. Every
node process joins ``/ironflow-node-<owner pid>`` before it executes (kubelet's ``cgroupRoot`` is
the same path, so the pods go beneath it); :meth:`NodeCgroup.kill` freezes the tree, kills every
task in it and waits until it is empty, and :meth:`NodeCgroup.remove` deletes it bottom-up in every
hierarchy, including the directories runc and kubelet made. A node whose owner died is swept by the
next :func:`sweep`. Never used for a cgroup this module did not name. A test's Docker daemon gets one
of its own the same way (``prefix="ironflow-dockerd-"``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from typing import Final

from ironflow.testing import processes

__all__ = ["NodeCgroup", "sweep"]

_PREFIX: Final = "ironflow-node-"
_EMPTY_WAIT_S: Final = 20.0


def _mounts() -> list[tuple[str, str]]:
    """(mount point, fstype) of every cgroup hierarchy mounted here."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 5 and rest and rest[0] in ("cgroup", "cgroup2"):
                out.append((fields[4], rest[0]))
    return out


class NodeCgroup:
    """``/<prefix><owner>`` (``/ironflow-node-<owner>``) in every cgroup hierarchy."""

    def __init__(self, owner: int | None = None, *, prefix: str = _PREFIX) -> None:
        self.name = f"{prefix}{owner or os.getpid()}"
        self._mounts = _mounts()

    @property
    def path(self) -> str:
        """The cgroup path kubelet takes as ``cgroupRoot``."""
        return f"/{self.name}"

    def _dirs(self) -> Iterator[tuple[str, str]]:
        for mount, fstype in self._mounts:
            yield os.path.join(mount, self.name), fstype

    def create(self) -> None:
        for directory, fstype in self._dirs():
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory)
            if fstype == "cgroup" and os.path.exists(os.path.join(directory, "cpuset.cpus")):
                parent = os.path.dirname(directory)
                for name in ("cpuset.cpus", "cpuset.mems"):  # v1 leaves a new cpuset empty
                    with open(os.path.join(parent, name)) as src, open(os.path.join(directory, name), "w") as dst:
                        dst.write(src.read())

    def procs_files(self) -> list[bytes]:
        """The ``cgroup.procs`` files a process writes its pid to (v1 hierarchies: the node runs v1)."""
        return [os.path.join(d, "cgroup.procs").encode() for d, fstype in self._dirs() if fstype == "cgroup"]

    def joiner(self) -> Callable[[], None]:
        """A pre-exec step that moves the calling (child) process into the node's cgroup."""
        files = self.procs_files()

        def join() -> None:
            pid = str(os.getpid()).encode()
            for path in files:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)

        return join

    def _tree(self) -> list[str]:
        """Every directory of the node's cgroup, deepest first, in every hierarchy."""
        out: list[str] = []
        for directory, _ in self._dirs():
            if os.path.isdir(directory):
                out += [root for root, _, _ in os.walk(directory, topdown=False)]
        return out

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self._tree():
            with contextlib.suppress(OSError, ValueError), open(os.path.join(directory, "cgroup.procs")) as f:
                found.update(int(x) for x in f.read().split())
        return found

    def _freezer(self) -> str | None:
        for directory, _ in self._dirs():
            if os.path.exists(os.path.join(directory, "freezer.state")):
                return os.path.join(directory, "freezer.state")
        return None

    def kill(self) -> None:
        """Freeze the tree (nothing forks away), SIGKILL every task, thaw, wait until empty."""
        freezer = self._freezer()
        deadline = time.monotonic() + _EMPTY_WAIT_S
        while pids := self.pids():
            if freezer is not None:
                with contextlib.suppress(OSError), open(freezer, "w") as f:
                    f.write("FROZEN")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if freezer is not None:
                with contextlib.suppress(OSError), open(freezer, "w") as f:
                    f.write("THAWED")
            if time.monotonic() > deadline:
                raise RuntimeError(f"tasks left in {self.path} after SIGKILL: {sorted(pids)[:10]}")
            time.sleep(0.05)

    def remove(self) -> None:
        """Delete every directory of the node's cgroup (kill first), deepest first."""
        deadline = time.monotonic() + _EMPTY_WAIT_S
        for directory in self._tree():
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def exists(self) -> bool:
        return any(os.path.isdir(d) for d, _ in self._dirs())


def sweep(prefix: str = _PREFIX) -> list[str]:
    """Kill and remove node cgroups (or others named with ``prefix``) whose owner is gone; return their paths."""
    swept = []
    names: set[str] = set()
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    for mount, _ in _mounts():
        with contextlib.suppress(OSError):
            names.update(e.name for e in os.scandir(mount) if pattern.match(e.name))
    for name in sorted(names):
        match = pattern.match(name)
        assert match is not None
        if processes.running(int(match.group(1))):
            continue
        cgroup = NodeCgroup(int(match.group(1)), prefix=prefix)
        cgroup.kill()
        cgroup.remove()
        swept.append(cgroup.path)
    return swept
