"""One cgroup per sandbox: find where they can go, make one, kill everything in it, remove it (I/O).

Where: under the worker's own cgroup, in cgroup v2 when the controllers are delegated to
it (``cgroup.subtree_control`` of that cgroup accepts them), else in each cgroup v1
hierarchy that is mounted and writable. A sandbox's cgroup is ``ironflow-<worker
pid>-<n>``; one left by a worker that died (its pid gone) is killed and removed at the
next :func:`probe`. The sandbox's first process is in the cgroup before the sandbox runtime
does anything (:mod:`~ironflow.local.sandbox.spawn`: the worker moves it while it waits at its
gate, or it joins by itself, :attr:`SandboxCgroup.join_files`, from a root worker's gated bash or
between fork and exec, :func:`child_setup`), so nothing it starts is outside.

The kill stops the whole tree at once (v2 ``cgroup.kill``; v1 freeze, SIGKILL each task,
thaw) and waits until the cgroup is empty: a fork bomb cannot outrun it. :meth:`SandboxCgroup.frozen`
stops every task while the host reads what the sandbox writes (a session's workspace), so
nothing in it moves under the read. Never used for anything but cgroups named by this module.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import resource
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from ironflow import _lazy
from ironflow.local.sandbox import identity, limits

if TYPE_CHECKING:
    import asyncio
else:
    asyncio = _lazy.module("asyncio")  # ``ironflow exec`` kills and removes blocking, without it

__all__ = ["KEPT_PREFIX", "FreezeFailed", "SandboxCgroup", "Support", "child_setup", "probe"]

log = logging.getLogger("ironflow.local")

_WANTED: Final = frozenset({"pids", "memory", "cpu"})
_V1_WANTED: Final = _WANTED | {"freezer"}
_PREFIX: Final = "ironflow-"
KEPT_PREFIX: Final = "ironflow-kept-"
_NAME: Final = re.compile(r"^ironflow-(\d+)-\d+$")
_EMPTY_WAIT_S: Final = 5.0
_FREEZE_WAIT_S: Final = 5.0
_counter = itertools.count(1)


class FreezeFailed(Exception):
    """A sandbox's cgroup could not be frozen (no freezer, or its tasks did not stop in time)."""


@dataclass(frozen=True)
class Support:
    """Where this worker's sandbox cgroups go, and which controllers they get."""

    version: Literal[0, 1, 2]
    #: v2: ``{"": dir}``; v1: controller -> the worker's cgroup directory in that hierarchy.
    parents: Mapping[str, str] = field(default_factory=dict)
    controllers: frozenset[str] = frozenset()
    why_not: str = ""

    def describe(self) -> str:
        """One line saying which limits hold by cgroup and which fall back to rlimits."""
        held = sorted(self.controllers & _WANTED)
        fallback = [name for name, c in (("processes", "pids"), ("memory", "memory")) if c not in self.controllers]
        kill = {2: "cgroup.kill", 1: "freeze+kill" if "freezer" in self.controllers else "kill loop"}.get(
            self.version, "process group"
        )
        parts = [f"cgroup v{self.version}: {', '.join(held) or 'none'}" if self.version else "no cgroup"]
        parts.append(f"kill by {kill}")
        if fallback:
            parts.append(f"rlimit fallback for {', '.join(fallback)}")
        parts.append("rlimits: open files, file size")
        if self.why_not:
            parts.append(self.why_not)
        return "; ".join(parts)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root inside the hierarchy, fstype, super options) of each cgroup mount."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                out.append((fields[4], fields[3], rest[0], set(rest[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            for name in names.split(",") if names else [""]:
                out[name] = path
    return out


def _join(mount: str, root: str, path: str) -> str:
    rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
    return os.path.normpath(os.path.join(mount, "" if rel == "." else rel))


def _v2(own: Mapping[str, str]) -> Support | str:
    mount = next(((m, r) for m, r, t, _ in _mounts() if t == "cgroup2"), None)
    if mount is None or "" not in own:
        return "no cgroup v2 mount"
    parent = _join(mount[0], mount[1], own[""])
    try:
        with open(os.path.join(parent, "cgroup.controllers")) as f:
            available = frozenset(f.read().split()) & _WANTED
    except OSError:
        return "cgroup v2 not readable"
    if "pids" not in available:
        return "cgroup v2 has no pids controller here (the controllers are bound to v1)"
    try:  # fails (EBUSY) when the worker itself lives in ``parent``: not delegated
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write(" ".join(f"+{c}" for c in sorted(available)))
    except OSError as exc:
        return f"cgroup v2 controllers not delegated to {parent} ({os.strerror(exc.errno or 0)})"
    return Support(2, {"": parent}, available)


def _v1(own: Mapping[str, str]) -> Support | str:
    parents: dict[str, str] = {}
    for mount, root, fstype, options in _mounts():
        for controller in options & _V1_WANTED:
            if fstype == "cgroup" and controller in own and os.access(mount, os.W_OK):
                parents[controller] = _join(mount, root, own[controller])
    if "pids" not in parents:
        return "no writable cgroup v1 pids hierarchy"
    return Support(1, parents, frozenset(parents))


def probe() -> Support:
    """Find where sandbox cgroups can go on this machine, sweep ones left by dead workers."""
    try:
        own = _own_cgroups()
    except OSError:
        return Support(0, why_not="no /proc/self/cgroup")
    v2 = _v2(own)
    found = v2 if isinstance(v2, Support) else _v1(own)
    if not isinstance(found, Support):
        return Support(0, why_not=f"{v2}; {found}")
    for parent in set(found.parents.values()):
        _sweep(parent)
    return found


def _sweep(parent: str) -> None:
    """Kill and remove the sandbox cgroups of workers that are gone."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            match = _NAME.match(entry.name)
            if match is None or _alive(int(match.group(1))):
                continue
            for pid in _pids(entry.path):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    os.rmdir(entry.path)
                    log.info("removed the stale sandbox cgroup %s", entry.path)
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        break
                    time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pids(directory: str) -> list[int]:
    try:
        with open(os.path.join(directory, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class SandboxCgroup:
    """The cgroup (one directory per v1 controller, or one v2 directory) of one sandbox."""

    def __init__(self, support: Support, sandbox_limits: limits.SandboxLimits, *, kept: bool = False) -> None:
        """``kept``: a session's that may outlive this process; its name is not a worker's, so no
        sweep kills it when this process is gone (its records do: :mod:`ironflow.local.sessions.adoption`)."""
        self.support = support
        name = f"{KEPT_PREFIX if kept else _PREFIX}{os.getpid()}-{next(_counter)}"
        self.dirs: dict[str, str] = {}
        self._freezes = 0
        try:
            if support.version == 2:
                self.dirs[""] = os.path.join(support.parents[""], name)
                os.mkdir(self.dirs[""])
                for file, value in limits.v2_files(sandbox_limits, support.controllers).items():
                    _write(os.path.join(self.dirs[""], file), value)
            else:
                for controller, files in limits.v1_files(sandbox_limits, support.controllers).items():
                    directory = os.path.join(support.parents[controller], name)
                    os.mkdir(directory)
                    self.dirs[controller] = directory
                    for file, value in files.items():
                        path = os.path.join(directory, file)
                        if file == "memory.memsw.limit_in_bytes" and not os.path.exists(path):
                            continue  # no swap accounting on this kernel: nothing to bound
                        _write(path, value)
        except OSError:
            self.remove_now()
            raise

    @classmethod
    def adopt(cls, support: Support, dirs: dict[str, str]) -> SandboxCgroup:
        """The cgroup ``dirs`` (controller: directory) an earlier process made, as a kept session's."""
        group = cls.__new__(cls)
        group.support, group.dirs, group._freezes = support, dict(dirs), 0
        return group

    @property
    def procs_files(self) -> tuple[bytes, ...]:
        """The ``cgroup.procs`` files another process writes the sandbox's first process's pid into."""
        return tuple(os.fsencode(os.path.join(d, "cgroup.procs")) for d in self.dirs.values())

    @property
    def join_files(self) -> tuple[bytes, ...]:
        """The files the sandbox's first process writes ``0`` into to join by itself, single-threaded:
        v1's per-thread ``tasks``, where a thread moving itself skips the global lock whose first
        taker waits out an RCU grace period (5-13 ms here; ``cgroup.procs`` takes it); v2's ``cgroup.procs``."""
        return tuple(
            os.fsencode(os.path.join(d, "cgroup.procs" if key == "" else "tasks")) for key, d in self.dirs.items()
        )

    def _main(self) -> str:
        return self.dirs.get("") or self.dirs["pids"]

    @property
    def can_freeze(self) -> bool:
        """Whether :meth:`frozen` can stop the tasks (v2, or v1 with the freezer controller)."""
        return "" in self.dirs or "freezer" in self.dirs

    def _set_frozen(self, frozen: bool) -> None:
        if "" in self.dirs:
            _write(os.path.join(self.dirs[""], "cgroup.freeze"), "1" if frozen else "0")
        else:
            _write(os.path.join(self.dirs["freezer"], "freezer.state"), "FROZEN" if frozen else "THAWED")

    def _is_frozen(self) -> bool:
        if "" in self.dirs:
            return "frozen 1" in _read(os.path.join(self.dirs[""], "cgroup.events")).splitlines()
        return _read(os.path.join(self.dirs["freezer"], "freezer.state")) == "FROZEN"

    async def _freeze(self) -> None:
        try:
            self._set_frozen(True)
            deadline = time.monotonic() + _FREEZE_WAIT_S
            for tries in itertools.count(1):
                if self._is_frozen():
                    return
                if time.monotonic() > deadline:
                    raise FreezeFailed(f"its tasks did not stop within {_FREEZE_WAIT_S:g} s")
                await asyncio.sleep(0.002)
                if tries % 25 == 0:  # v1 marks each task once: one that stopped under ptrace since is marked again
                    self._set_frozen(True)
        except OSError as exc:
            raise FreezeFailed(f"its freezer cannot be used: {exc.strerror}") from None

    @contextlib.asynccontextmanager
    async def frozen(self) -> AsyncIterator[None]:
        """Every task of the cgroup stopped (none runs, none starts) for the block, thawed after;
        nested blocks thaw at the last one's end.

        Raises:
            FreezeFailed: no freezer, the freezer cannot be written, or the tasks did not stop
                within 5 s (they are thawed again).
        """
        if not self.can_freeze:
            raise FreezeFailed("no cgroup freezer for this sandbox")
        self._freezes += 1
        try:
            if self._freezes == 1:
                await self._freeze()
            yield
        finally:
            self._freezes -= 1
            if self._freezes == 0:
                with contextlib.suppress(OSError):
                    self._set_frozen(False)

    def memory_kills(self) -> int:
        """How many of the sandbox's processes the kernel killed at its memory limit (0 with no
        memory controller, or when its counters cannot be read)."""
        events = os.path.join(self.dirs[""], "memory.events") if "" in self.dirs else None
        if events is None and "memory" in self.dirs:
            events = os.path.join(self.dirs["memory"], "memory.oom_control")
        if events is None:
            return 0
        try:
            return limits.oom_kills(_read(events))
        except OSError:
            return 0

    def task_refusals(self) -> int:
        """How many new tasks the cgroup refused at its pids limit (0 with no pids controller, or
        when its counter cannot be read)."""
        base = self.dirs.get("") or self.dirs.get("pids")
        if base is None:
            return 0
        try:
            return limits.task_refusals(_read(os.path.join(base, "pids.events")))
        except OSError:
            return 0

    def pids(self) -> list[int]:
        """The host pids of every task in the cgroup now."""
        return _pids(self._main())

    async def kill(self) -> None:
        """SIGKILL every task in the cgroup at once and wait until it is empty (bounded)."""
        await _waited(self._killing())

    def kill_blocking(self) -> None:
        """:meth:`kill`, waiting in this thread (a process that runs one sandbox and nothing else)."""
        _slept(self._killing())

    def _killing(self) -> Iterator[float]:
        """The kill's steps; each pause (seconds) is waited out by the caller before the next."""
        main = self._main()
        if not _pids(main):
            return  # the usual end: the sandbox exited and took its tree along
        if self.support.version == 2:
            with contextlib.suppress(OSError):
                _write(os.path.join(main, "cgroup.kill"), "1")
        elif "freezer" in self.dirs:
            yield from self._freezing_and_killing()
        deadline = time.monotonic() + _EMPTY_WAIT_S
        while (pids := _pids(main)) and time.monotonic() < deadline:
            for pid in pids:  # v1 without freezer: the pids limit bounds how many can appear
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            yield 0.005

    def _freezing_and_killing(self) -> Iterator[float]:
        freezer = self.dirs["freezer"]
        state = os.path.join(freezer, "freezer.state")
        with contextlib.suppress(OSError):
            _write(state, "FROZEN")
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                if _read(state) == "FROZEN":
                    break
                yield 0.002
        for pid in _pids(freezer):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            _write(state, "THAWED")  # a frozen task does not die until thawed

    async def remove(self) -> None:
        """Kill what is left, then remove the directories."""
        await _waited(self._removing())

    def remove_blocking(self) -> None:
        """:meth:`remove`, waiting in this thread."""
        _slept(self._removing())

    def _removing(self) -> Iterator[float]:
        yield from self._killing()
        for _ in range(100):
            if self.remove_now():
                return
            yield 0.01
        log.warning("sandbox cgroup %s could not be removed: still busy", self._main())

    def remove_now(self) -> bool:
        """Remove the directories that are empty; True when none is left."""
        for key, directory in list(self.dirs.items()):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            del self.dirs[key]
        return not self.dirs


async def _waited(steps: Iterator[float]) -> None:
    """Run a kill's or removal's ``steps``, each pause awaited (the event loop's face)."""
    for pause in steps:
        await asyncio.sleep(pause)


def _slept(steps: Iterator[float]) -> None:
    """Run ``steps``, each pause slept in this thread (the blocking face)."""
    for pause in steps:
        time.sleep(pause)


def child_setup(
    join_files: tuple[bytes, ...],
    pairs: tuple[tuple[int, int], ...],
    host_uid: int | None,
    binds: tuple[tuple[bytes, bytes], ...] = (),
    die_with_parent: bool = False,
) -> Callable[[], None]:
    """The function run in the sandbox's first process between fork and exec: join the cgroup
    (:attr:`SandboxCgroup.join_files`), set the rlimits, on a root worker stage the bind sources
    (:mod:`ironflow.local.sandbox.identity`) and drop to ``host_uid``, then, with ``die_with_parent``,
    ask for SIGKILL once this process dies (last: a uid change clears it). It takes no lock and logs
    nothing (the worker has threads); ``ironflow-enter`` does the same in C where it is built."""

    if (host_uid is not None and binds) or die_with_parent:
        identity.load_libc()  # here: nothing is imported after the fork
    parent = os.getpid()

    def setup() -> None:
        for path in join_files:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # 0: the writing thread itself, all of this process after fork
            finally:
                os.close(fd)
        if host_uid is not None and binds:  # nothing to stage: no mount namespace to make (and tear down)
            identity.bind_staged(binds)
        # After every open: the worker's own fds are still open here, and past RLIMIT_NOFILE's new
        # value (a worker holding more files than one sandbox process may) no open would succeed.
        for which, value in pairs:
            resource.setrlimit(which, (value, value))
        if host_uid is not None:
            os.setgroups([])
            os.setresgid(host_uid, host_uid, host_uid)
            os.setresuid(host_uid, host_uid, host_uid)
        if die_with_parent:
            identity.die_with(parent)

    return setup
