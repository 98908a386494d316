"""Limits become the right cgroup files and rlimits, and bad limits are one clear line."""

from __future__ import annotations

import doctest
import resource

import pytest

from ironflow import errors
from ironflow.local.sandbox import bwrap, cgroups, limits

ALL = frozenset({"pids", "memory", "cpu", "freezer"})


def test_v2_files_bound_processes_memory_swap_and_cpu() -> None:
    files = limits.v2_files(limits.SandboxLimits(pids=7, memory_bytes=1 << 20, cpus=1.5), ALL)
    assert files == {
        "pids.max": "7",
        "memory.max": str(1 << 20),
        "memory.swap.max": "0",
        "cpu.weight": "100",
        "cpu.max": "150000 100000",
    }


def test_v1_files_write_memsw_after_memory_and_skip_missing_controllers() -> None:
    files = limits.v1_files(limits.SandboxLimits(memory_bytes=1 << 20), frozenset({"pids", "memory"}))
    assert list(files) == ["pids", "memory"]
    assert list(files["memory"]) == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]


def test_rlimits_fall_back_for_missing_controllers_only() -> None:
    lim = limits.SandboxLimits()
    held = dict(limits.rlimits(lim, nproc=False, data=False))
    assert set(held) == {resource.RLIMIT_NOFILE, resource.RLIMIT_FSIZE}
    fallback = dict(limits.rlimits(lim, nproc=True, data=True))
    assert fallback[resource.RLIMIT_NPROC] == lim.pids
    assert fallback[resource.RLIMIT_DATA] == lim.memory_bytes


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"pids": 0}, "sandbox limit pids must be a positive whole number, got 0"),
        ({"memory_bytes": 1.5}, "sandbox limit memory_bytes must be a positive whole number, got 1.5"),
        ({"cpus": 0.0}, "sandbox limit cpus must be at least 0.01 cores, got 0.0"),
        ({"cpus": float("inf")}, "sandbox limit cpus must be a number of cores, got inf"),
        ({"proxy_connections": 0}, "sandbox limit proxy_connections must be a positive whole number, got 0"),
    ],
)
def test_bad_limits_are_refused_in_one_line(change: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError) as info:
        limits.check_limits(limits.SandboxLimits(**change))  # type: ignore[arg-type]
    assert str(info.value) == message


def test_the_report_names_each_mechanism() -> None:
    v1 = cgroups.Support(1, {"pids": "/x"}, frozenset({"pids", "freezer"}))
    assert v1.describe() == (
        "cgroup v1: pids; kill by freeze+kill; rlimit fallback for memory; rlimits: open files, file size"
    )
    none = cgroups.Support(0, why_not="no cgroup v2 mount")
    assert none.describe() == (
        "no cgroup; kill by process group; rlimit fallback for processes, memory; "
        "rlimits: open files, file size; no cgroup v2 mount"
    )


def test_a_first_process_joins_v1_by_its_thread_and_v2_by_its_process() -> None:
    """v1's ``tasks`` spares a thread that moves itself the global lock's wait; v2 has only ``cgroup.procs``."""
    v1 = cgroups.SandboxCgroup.adopt(cgroups.Support(1), {"pids": "/p/ironflow-1-1", "memory": "/m/ironflow-1-1"})
    assert v1.join_files == (b"/p/ironflow-1-1/tasks", b"/m/ironflow-1-1/tasks")
    assert v1.procs_files == (b"/p/ironflow-1-1/cgroup.procs", b"/m/ironflow-1-1/cgroup.procs")
    v2 = cgroups.SandboxCgroup.adopt(cgroups.Support(2), {"": "/w/ironflow-1-1"})
    assert v2.join_files == v2.procs_files == (b"/w/ironflow-1-1/cgroup.procs",)


def test_bwrap_dev_is_a_directory_of_the_read_only_root_with_a_sized_shm() -> None:
    argv = bwrap.bwrap_argv(bwrap.BwrapSettings(command=("true",), root_entries=(), tmp_size_bytes=12345))
    assert "--dev" not in argv
    assert argv[argv.index("/dev") - 1] == "--dir"  # no tmpfs of its own: read-only with the root
    shm = argv.index("/dev/shm")
    assert argv[shm - 3 : shm + 1] == ["--size", "12345", "--tmpfs", "/dev/shm"]


@pytest.mark.parametrize(
    ("file_max", "pids", "open_files"),
    [
        (2_466_097, 1024, 602),  # the reviewed host: 1024 x 4096 would be 4.2 M, above its table
        (9_223_372_036_854_775_807, 1024, 4096),  # systemd's LONG_MAX: the configured value holds
        (16_777_216, 1024, 4096),
        (1_000_000, 1024, 244),
        (100_000, 390, 64),  # a small host: fewer processes, not a useless file limit
        (100, 1, 64),
    ],
)
def test_open_files_times_processes_stay_under_a_share_of_the_host_table(
    file_max: int, pids: int, open_files: int
) -> None:
    bounded = limits.within_file_max(limits.SandboxLimits(pids=1024, open_files=4096), file_max)
    assert (bounded.pids, bounded.open_files) == (pids, open_files)
    if file_max * limits.FILE_MAX_SHARE >= limits.MIN_OPEN_FILES:
        assert bounded.pids * bounded.open_files <= file_max * limits.FILE_MAX_SHARE


def test_an_unknown_table_or_a_lower_setting_is_kept() -> None:
    configured = limits.SandboxLimits(pids=100, open_files=256)
    assert limits.within_file_max(configured, None) == configured
    assert limits.within_file_max(configured, 2_466_097) == configured


def test_the_limits_docstring_examples_run() -> None:
    result = doctest.testmod(limits)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_oom_kill_count_is_read_from_either_cgroup_version() -> None:
    v2 = "low 0\nhigh 0\nmax 40\noom 2\noom_kill 2\noom_group_kill 0\n"
    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
    assert (limits.oom_kills(v2), limits.oom_kills(v1), limits.oom_kills(""), limits.oom_kills("oom_kill x")) == (
        2,
        3,
        0,
        0,
    )
    assert limits.memory_kill_message(256 << 20, 1) == (
        "killed at the sandbox's memory limit of 256 MiB (SandboxLimits.memory_bytes): "
        "the kernel stopped 1 process that went past it"
    )
    assert "of 1.5 GiB" in limits.memory_kill_message(3 << 29, 2)
