"""gVisor's limits are the provider's (issue 34, L8): memory up to ``memory_bytes`` (the host file
size limit on runsc capped the memory file behind all of the sandbox's memory, and the step died
by SIGSEGV at 1 GiB), the file size limit held inside gVisor's kernel instead, and a sandbox whose
kernel dies (a fork storm past the host task budget) says why rather than exit 2 in silence."""

from __future__ import annotations

import re
import shutil

import pytest

from ironflow.local.sandbox import cgroups, gvisor
from ironflow.local.sandbox.limits import SandboxLimits
from ironflow.local.sandbox_provider import LocalSandboxProvider

SUPPORT = cgroups.probe()

pytestmark = [
    pytest.mark.gvisor,
    pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

#: Allocates 100 MiB at a time and says how far it got.
ALLOCATE = (
    "import sys\nheld = []\nfor i in range({n}):\n"
    "    held.append(bytearray(100 << 20)); held[-1][::4096] = b'x' * len(held[-1][::4096])\n"
    "print('allocated', len(held) * 100, 'MiB', flush=True)\n"
)


@pytest.mark.skipif("memory" not in SUPPORT.controllers, reason=SUPPORT.describe())
async def test_memory_above_the_file_size_limit_is_allowed_up_to_the_memory_limit() -> None:
    provider = LocalSandboxProvider(
        isolation="gvisor", timeout=120, limits=SandboxLimits(memory_bytes=2 << 30, file_size_bytes=256 << 20)
    )
    fits = await provider.run_command(["python3", "-c", ALLOCATE.format(n=12)])  # 1.2 GiB of 2
    assert (fits.exit_code, fits.stdout) == (0, "allocated 1200 MiB\n"), fits.stderr[-500:]
    past = await provider.run_command(["python3", "-c", ALLOCATE.format(n=30)])  # 3 GiB of 2
    assert past.exit_code == 137, past.stderr[-500:]  # the memory cgroup's OOM killer, not a SIGSEGV
    assert "allocated" not in past.stdout


async def test_the_file_size_limit_holds_inside_gvisor() -> None:
    provider = LocalSandboxProvider(isolation="gvisor", timeout=60, limits=SandboxLimits(file_size_bytes=4 << 20))
    result = await provider.run_command(
        ["sh", "-c", "ulimit -f; dd if=/dev/zero of=/tmp/big bs=1M count=8 2>/dev/null; wc -c < /tmp/big"]
    )
    assert result.stdout.split() == [str(4 << 20 >> 9), str(4 << 20)], (result.stdout, result.stderr[-300:])


@pytest.mark.skipif("pids" not in SUPPORT.controllers, reason=SUPPORT.describe())
async def test_a_fork_storm_past_the_host_task_budget_ends_with_words() -> None:
    provider = LocalSandboxProvider(isolation="gvisor", timeout=60, limits=SandboxLimits(pids=512))
    result = await provider.run_command(["sh", "-c", "for i in $(seq 200); do sleep 20 & done 2>/dev/null; wait"])
    assert result.exit_code != 0
    # runsc's words (Go's for EAGAIN from clone, or a panic of the kernel where the failed clone
    # surfaced: the place varies), then ironflow's, from the cgroup's own count of refused tasks.
    assert re.search(r"resource temporarily unavailable|errno=11|^panic: ", result.stderr, re.M), result.stderr[-500:]
    assert result.stderr.endswith("\n" + gvisor.OUT_OF_TASKS.format(pids=512) + "\n")
    assert result.duration < 30
    assert len(result.stderr) < 16384, "one goroutine's trace, not every one's"
