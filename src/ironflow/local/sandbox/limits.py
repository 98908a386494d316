"""Per-sandbox resource limits as values: what a cgroup gets written, what rlimits are set (pure).

A hostile step may fork without end, allocate without end, fill a disk or hold open files
and connections without end. Each sandbox gets its own cgroup (processes, memory, CPU), its
own rlimits (open files, file size) and its own cap on connections to its auth proxy (each
one a descriptor of the worker's); where no cgroup controller can be used, rlimits stand in:

=================  =====================================  ===================================
limit              cgroup (v2 file / v1 file)             fallback without the controller
=================  =====================================  ===================================
processes          ``pids.max`` / ``pids.max``            ``RLIMIT_NPROC`` (holds only for a
                                                          non-root host uid, per uid)
memory             ``memory.max`` + ``memory.swap.max``   ``RLIMIT_DATA`` per process
                   / ``memory.limit_in_bytes``
CPU                ``cpu.max`` + ``cpu.weight``           none (nice is not a limit)
                   / ``cpu.cfs_quota_us`` + ``cpu.shares``
open files         always ``RLIMIT_NOFILE``, bounded so that
                   processes × open files stays under a
                   share of the host's ``fs.file-max``
                   (:func:`within_file_max`)
file size          always ``RLIMIT_FSIZE``
=================  =====================================  ===================================

Under gVisor the step's open-file and file-size limits are its spec's (:func:`oci_rlimits`),
enforced by gVisor's kernel, and ``runsc`` on the host gets no file size limit: it would cap the
memory file that backs all of the sandbox's memory (the step died by SIGSEGV at 1 GiB, far
below ``memory_bytes``). ``pids`` is a budget of host tasks there: under gVisor's ptrace
platform each process of the step costs about ten (its stub process), a fork storm far more.

This module never touches the host: :mod:`ironflow.local.sandbox.cgroups` applies these values.
"""

from __future__ import annotations

import dataclasses
import math
import resource
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors

__all__ = [
    "CPU_PERIOD_US",
    "DEFAULT_LIMITS",
    "FILE_MAX_SHARE",
    "MIN_OPEN_FILES",
    "SandboxLimits",
    "check_limits",
    "memory_kill_message",
    "oci_rlimits",
    "oom_kills",
    "rlimits",
    "task_refusals",
    "v1_files",
    "v2_files",
    "within_file_max",
]

#: The CFS period the CPU quota is expressed in.
CPU_PERIOD_US: Final = 100_000
#: The sandbox's share of CPU against the worker's own processes: the default, equal to them. A
#: lower one made a starting sandbox wait behind its own parent under load (a cold session open
#: took 369 ms at 512 shares, 230 ms at 1024); ``cpus`` is the limit, the weight only a share.
_CPU_WEIGHT_V2: Final = 100
_CPU_SHARES_V1: Final = 1024


@dataclass(frozen=True)
class SandboxLimits:
    """What one sandbox may use; ``cpus`` None means no quota (only the default weight)."""

    #: Tasks (processes and threads) in the sandbox's cgroup; gVisor's runsc needs ~100 itself.
    pids: int = 1024
    memory_bytes: int = 4 << 30
    cpus: float | None = None
    open_files: int = 4096
    file_size_bytes: int = 1 << 30
    #: Connections open at once to the sandbox's auth proxy, whose descriptors are the worker's:
    #: past it one is closed as it is accepted, so a step cannot run the worker out of them.
    proxy_connections: int = 64


DEFAULT_LIMITS: Final = SandboxLimits()
#: One sandbox's processes may together hold at most this fraction of the host's open-file table.
FILE_MAX_SHARE: Final = 0.25
#: Open files per process below which common programs fail: fewer processes are allowed instead.
MIN_OPEN_FILES: Final = 64


def within_file_max(limits: SandboxLimits, file_max: int | None) -> SandboxLimits:
    """``limits`` with ``open_files`` (then, on a very small table, ``pids``) lowered so that
    ``pids × open_files`` stays under :data:`FILE_MAX_SHARE` of ``file_max``, the host's ``fs.file-max``
    (None: unknown, unchanged).

    ``RLIMIT_NOFILE`` is per process, and every process of a bubblewrap sandbox is a host process:
    1024 processes of 4096 files each may hold 4.2 M open files, above a host table of 2.47 M, and
    when the table is full no process on the host (the worker included) can open a file. With the
    product under a quarter of the table, one sandbox cannot fill it.

    >>> within_file_max(SandboxLimits(pids=1024, open_files=4096), 2_466_097).open_files
    602
    >>> within_file_max(SandboxLimits(pids=1024, open_files=4096), 2**63 - 1).open_files
    4096
    """
    if file_max is None:
        return limits
    budget = int(file_max * FILE_MAX_SHARE)
    open_files = min(limits.open_files, budget // limits.pids)
    if open_files >= MIN_OPEN_FILES:
        return dataclasses.replace(limits, open_files=open_files)
    open_files = min(limits.open_files, MIN_OPEN_FILES)
    return dataclasses.replace(limits, open_files=open_files, pids=max(1, min(limits.pids, budget // open_files)))


def check_limits(limits: SandboxLimits) -> None:
    """Refuse a limit that is not a positive number, naming the setting.

    Raises:
        ConfigError: one line naming the setting and the value.
    """
    for name in ("pids", "memory_bytes", "open_files", "file_size_bytes", "proxy_connections"):
        value = getattr(limits, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise errors.ConfigError(f"sandbox limit {name} must be a positive whole number, got {value!r}")
    if limits.cpus is not None and not (isinstance(limits.cpus, int | float) and math.isfinite(limits.cpus)):
        raise errors.ConfigError(f"sandbox limit cpus must be a number of cores, got {limits.cpus!r}")
    if limits.cpus is not None and limits.cpus < 0.01:
        raise errors.ConfigError(f"sandbox limit cpus must be at least 0.01 cores, got {limits.cpus!r}")


def _quota_us(cpus: float) -> int:
    return max(1000, round(cpus * CPU_PERIOD_US))


def v2_files(limits: SandboxLimits, controllers: frozenset[str]) -> dict[str, str]:
    """The cgroup v2 interface files and their values, for the controllers that are enabled."""
    files: dict[str, str] = {}
    if "pids" in controllers:
        files["pids.max"] = str(limits.pids)
    if "memory" in controllers:
        files["memory.max"] = str(limits.memory_bytes)
        files["memory.swap.max"] = "0"  # swap would let the step past memory.max
    if "cpu" in controllers:
        files["cpu.weight"] = str(_CPU_WEIGHT_V2)
        if limits.cpus is not None:
            files["cpu.max"] = f"{_quota_us(limits.cpus)} {CPU_PERIOD_US}"
    return files


def v1_files(limits: SandboxLimits, controllers: frozenset[str]) -> dict[str, dict[str, str]]:
    """Per cgroup v1 controller, its files and values (in the order they must be written)."""
    files: dict[str, dict[str, str]] = {}
    if "pids" in controllers:
        files["pids"] = {"pids.max": str(limits.pids)}
    if "memory" in controllers:
        # memsw (memory + swap) may only be set at or above the memory limit: set it after.
        files["memory"] = {"memory.limit_in_bytes": str(limits.memory_bytes)}
        files["memory"]["memory.memsw.limit_in_bytes"] = str(limits.memory_bytes)
    if "cpu" in controllers:
        files["cpu"] = {"cpu.shares": str(_CPU_SHARES_V1)}
        if limits.cpus is not None:
            files["cpu"]["cpu.cfs_period_us"] = str(CPU_PERIOD_US)
            files["cpu"]["cpu.cfs_quota_us"] = str(_quota_us(limits.cpus))
    if "freezer" in controllers:
        files["freezer"] = {}  # no limit: it is how the whole tree is stopped before the kill
    return files


def rlimits(limits: SandboxLimits, *, nproc: bool, data: bool, gvisor: bool = False) -> tuple[tuple[int, int], ...]:
    """The ``(resource, value)`` pairs set as soft and hard limits in the sandbox's first process.

    ``nproc`` and ``data`` are the fallbacks for a missing pids or memory controller. With
    ``gvisor`` that process is ``runsc``: no file size limit (the spec has the step's).
    """
    pairs = [(resource.RLIMIT_NOFILE, limits.open_files)]
    if not gvisor:
        pairs.append((resource.RLIMIT_FSIZE, limits.file_size_bytes))
    if nproc:
        pairs.append((resource.RLIMIT_NPROC, limits.pids))
    if data:
        pairs.append((resource.RLIMIT_DATA, limits.memory_bytes))
    return tuple(pairs)


def oci_rlimits(limits: SandboxLimits) -> list[dict[str, Any]]:
    """The ``process.rlimits`` of a gVisor spec: the step's open files and file size."""
    values = (("RLIMIT_NOFILE", limits.open_files), ("RLIMIT_FSIZE", limits.file_size_bytes))
    return [{"type": name, "hard": value, "soft": value} for name, value in values]


def task_refusals(events: str) -> int:
    r"""How many times a cgroup refused a new task at its pids limit, from its ``pids.events``
    (v1 and v2 both have a ``max N`` line; 0 when there is none).

    >>> task_refusals("max 3")
    3
    >>> task_refusals("")
    0
    """
    return _counter(events, "max")


def oom_kills(events: str) -> int:
    r"""How many processes the kernel's OOM killer stopped in a cgroup, from its ``memory.events``
    (v2) or ``memory.oom_control`` (v1): both have an ``oom_kill N`` line (0 when there is none).

    >>> oom_kills("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0")
    1
    >>> oom_kills("oom_kill_disable 0\nunder_oom 0")
    0
    """
    return _counter(events, "oom_kill")


def _counter(events: str, wanted: str) -> int:
    """The ``wanted N`` counter of a cgroup's events file; 0 when it has none."""
    for line in events.splitlines():
        name, _, value = line.partition(" ")
        if name == wanted and value.strip().isdigit():
            return int(value)
    return 0


def memory_kill_message(memory_bytes: int, kills: int) -> str:
    r"""What a sandbox whose processes the kernel killed at its memory limit says, in one line.

    >>> print(memory_kill_message(64 << 20, 1).replace(": ", ":\n"))
    killed at the sandbox's memory limit of 64 MiB (SandboxLimits.memory_bytes):
    the kernel stopped 1 process that went past it
    >>> memory_kill_message(4 << 30, 2).split(": ")[1]
    'the kernel stopped 2 processes that went past it'
    """
    size = f"{memory_bytes / (1 << 30):g} GiB" if memory_bytes >= 1 << 30 else f"{memory_bytes / (1 << 20):g} MiB"
    processes = "1 process" if kills == 1 else f"{kills} processes"
    return (
        f"killed at the sandbox's memory limit of {size} (SandboxLimits.memory_bytes): "
        f"the kernel stopped {processes} that went past it"
    )
