"""Per-sandbox limits hold against a hostile step, and nothing of it outlives the call (real
bubblewrap, real gVisor, a real Docker daemon, real cgroups). Every hostile test checks its cap
first, is bounded in time, and compares the host's process count before and after."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from tests.fakes.local_sandbox import ALL_ISOLATIONS, DOCKER, ISOLATIONS, PODMAN, on_podman

from ironflow import errors
from ironflow.local.sandbox import cgroups
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox.limits import SandboxLimits
from ironflow.local.sandbox_provider import LocalSandboxProvider

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

SUPPORT = cgroups.probe()
needs_pids_cgroup = pytest.mark.skipif("pids" not in SUPPORT.controllers, reason=SUPPORT.describe())
needs_memory_cgroup = pytest.mark.skipif("memory" not in SUPPORT.controllers, reason=SUPPORT.describe())


def _host_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def _our_cgroups() -> list[str]:
    return [
        p for parent in SUPPORT.parents.values() for p in glob.glob(os.path.join(parent, f"ironflow-{os.getpid()}-*"))
    ]


def _runsc_cgroups() -> set[str]:
    return {p for parent in SUPPORT.parents.values() for p in glob.glob(os.path.join(parent, "runsc-*"))}


@pytest.fixture
def host_processes() -> Iterator[int]:
    """The host's process count before the test; after it, no more than a little over that."""
    before = _host_processes()
    yield before
    assert _host_processes() <= before + 20, "the sandbox left processes on the host"


@needs_pids_cgroup
@pytest.mark.parametrize("isolation", [ISOLATIONS[0], DOCKER, PODMAN])
async def test_a_fork_bomb_is_capped_and_gone_before_the_call_returns(
    isolation: Isolation, host_processes: int
) -> None:
    provider = LocalSandboxProvider(isolation=isolation, timeout=4, limits=SandboxLimits(pids=32))
    # The cap first, harmlessly: 100 sleepers cannot start under pids=32.
    capped = await provider.run_command(["sh", "-c", "for i in $(seq 100); do sleep 3 & done 2>/dev/null; echo $?"])
    assert _host_processes() <= host_processes + 40
    assert capped.duration < 4
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, _host_processes())
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        async with asyncio.timeout(30):
            # Either the step's own shell fails to fork its sleep and exits, or it times out.
            with contextlib.suppress(errors.AgentTimeout):
                result = await provider.run_command(["sh", "-c", "b(){ b|b& }; b; sleep 30"])
                assert result.exit_code != 0
    finally:
        watcher.cancel()
    assert peak <= host_processes + 32 + 20  # the cap plus what else the host runs meanwhile
    assert _host_processes() <= host_processes + 20  # gone before run_command returned
    assert _our_cgroups() == []


@needs_memory_cgroup
@pytest.mark.parametrize("isolation", ALL_ISOLATIONS)
async def test_memory_past_the_limit_is_killed_and_no_runtime_cgroup_is_left(
    isolation: Isolation, host_processes: int, request: pytest.FixtureRequest
) -> None:
    runsc_before = _runsc_cgroups()
    provider = LocalSandboxProvider(isolation=isolation, timeout=60, limits=SandboxLimits(memory_bytes=256 << 20))
    result = await provider.run_command(
        ["python3", "-c", "b = [bytearray(100 << 20) for _ in range(40)]; print('allocated')"]
    )
    assert result.exit_code == 137  # SIGKILL by the OOM killer of the sandbox's memory cgroup
    assert "allocated" not in result.stdout
    if not on_podman(request):  # PODMAN_GAPS["oom"]: the kill holds, its name does not come back
        assert result.killed is not None, "the memory kill was not told apart from any other SIGKILL"
    with pytest.raises(errors.AgentTimeout):
        await provider.run_command(["sleep", "30"], timeout_s=2)
    assert _our_cgroups() == []
    assert _runsc_cgroups() == runsc_before


@pytest.mark.parametrize("isolation", ALL_ISOLATIONS)
async def test_a_timed_out_command_keeps_what_it_wrote_and_leaves_no_process(
    isolation: Isolation, host_processes: int
) -> None:
    provider = LocalSandboxProvider(isolation=isolation, timeout=60)
    marker = "29.4321"  # an argument no other process on the host has
    with pytest.raises(errors.CommandTimeout) as caught:
        await provider.run_command(["sh", "-c", f"echo started; printf 'no newline' >&2; sleep {marker}"], timeout_s=3)
    assert isinstance(caught.value, errors.AgentTimeout)  # callers that catch the agent's timeout still do
    assert str(caught.value) == "command timed out after 3s"
    timed_out = caught.value
    assert (timed_out.output, timed_out.stdout, timed_out.stderr) == (b"started\n", b"started\n", b"no newline")
    assert not [c for c in _cmdlines() if marker in c], "the command's process outlived the call"
    assert _our_cgroups() == []


def _cmdlines() -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            out.append(f.read().decode(errors="replace"))
    return out


async def test_dev_is_read_only_and_dev_shm_is_sized() -> None:
    provider = LocalSandboxProvider(timeout=30, tmp_size_bytes=4 << 20)
    result = await provider.run_command(
        [
            "sh",
            "-c",
            "echo x > /dev/fill || echo dev-refused; "
            "dd if=/dev/zero of=/dev/shm/fill bs=1M count=8 2>/dev/null || echo shm-full; "
            "echo ok > /dev/null && echo null-ok",
        ]
    )
    assert result.stdout.split() == ["dev-refused", "shm-full", "null-ok"]


async def test_release_run_kills_a_sandbox_that_is_still_starting(host_processes: int) -> None:
    provider = LocalSandboxProvider(timeout=30)
    task = asyncio.create_task(provider.run_command(["sleep", "30"], run_id="run-start"))
    await asyncio.sleep(0)  # run_command is inside the process start now, not past it
    assert await provider.release_run("run-start") == 1
    result = await asyncio.wait_for(task, 10)
    assert result.exit_code != 0
    assert result.duration < 10
    assert _our_cgroups() == []


@needs_pids_cgroup
def test_a_cgroup_left_by_a_dead_worker_is_swept_at_start() -> None:
    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    stale = os.path.join(SUPPORT.parents["pids"], f"ironflow-{dead}-1")
    os.mkdir(stale)
    try:
        LocalSandboxProvider()
        assert not os.path.exists(stale)
    finally:
        if os.path.exists(stale):
            os.rmdir(stale)


def test_the_provider_says_which_limits_hold() -> None:
    report = LocalSandboxProvider().limits_report()
    assert report == SUPPORT.describe()
    assert "rlimits: open files, file size" in report


@pytest.mark.parametrize("isolation", ALL_ISOLATIONS)
async def test_sandboxes_run_side_by_side(isolation: Isolation) -> None:
    """Several sandboxes at once on one machine (gVisor names each sandbox's control socket,
    machine-wide, after its container id: one id for all refused every run but the first)."""
    p = LocalSandboxProvider(isolation=isolation, timeout=60)
    async with asyncio.TaskGroup() as group:  # one that fails takes the others down with it
        runs = [group.create_task(p.run_command(["sh", "-c", f"sleep 1; echo {i}"])) for i in range(3)]
    assert [(r.result().exit_code, r.result().stdout.strip()) for r in runs] == [(0, "0"), (0, "1"), (0, "2")]
