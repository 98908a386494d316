"""One bubblewrap sandbox cannot fill the host's open-file table (issue 34 M4): each of its processes
is a host process, so ``pids × RLIMIT_NOFILE`` stays under a share of ``fs.file-max``. Real bubblewrap:
100 processes each open all the files they can, at once."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from ironflow.local.sandbox import bwrap, limits
from ironflow.local.sandbox_provider import LocalSandboxProvider

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

PROCESSES = 100
#: Opens /dev/null until it may not, prints how many it holds, holds them a moment, exits.
OPEN_ALL_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    long held = 0;
    while (open("/dev/null", O_RDONLY) >= 0) held++;
    printf("%ld\n", held);
    fflush(stdout);
    sleep(2);
    return 0;
}
"""


def _file_max() -> int:
    return int(Path("/proc/sys/fs/file-max").read_text())


def _allocated() -> int:
    return int(Path("/proc/sys/fs/file-nr").read_text().split()[0])


@pytest.fixture
def open_all(tmp_path: Path) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the test program")
    (tmp_path / "bin").mkdir()
    source = tmp_path / "open_all.c"
    source.write_text(OPEN_ALL_C)
    subprocess.run(["cc", "-O1", "-o", str(tmp_path / "bin" / "open_all"), str(source)], check=True)
    return tmp_path / "bin"


async def test_a_hundred_processes_opening_all_they_can_stay_under_the_host_share(open_all: Path) -> None:
    provider = LocalSandboxProvider(timeout=120)
    configured = limits.DEFAULT_LIMITS
    per_process = int(_file_max() * limits.FILE_MAX_SHARE) // configured.pids
    before = _allocated()
    lines: list[bytes] = []
    at_peak: list[int] = []

    def on_output(stream: str, data: bytes) -> None:
        lines.append(data)
        if not at_peak and b"".join(lines).count(b"\n") >= PROCESSES:  # all of them hold their files
            at_peak.append(_allocated())

    script = f"for i in $(seq {PROCESSES}); do /ift-bin/open_all & done; wait"
    result = await provider.run_command(
        ["sh", "-c", script], read_only_mounts=[bwrap.ReadOnlyMount(str(open_all), "/ift-bin")], on_output=on_output
    )
    assert result.exit_code == 0, result.stderr
    held = [int(line) for line in result.stdout.split()]
    assert len(held) == PROCESSES
    # Each process stops at the bound that keeps the whole sandbox (pids of them) in the share.
    assert max(held) <= min(configured.open_files, per_process)
    assert sum(held) <= PROCESSES * min(configured.open_files, per_process)
    assert max(held) * configured.pids <= _file_max() * limits.FILE_MAX_SHARE
    grew = at_peak[0] - before if at_peak else 0  # the host's table, others' files included
    print(f"{PROCESSES} processes held {sum(held)} files (at most {max(held)} each); host file-nr {grew:+d}")


async def test_a_worker_holding_more_files_than_a_sandbox_process_may_still_starts_one(open_all: Path) -> None:
    # The sandbox's first process is forked with the worker's fds open; it lowered RLIMIT_NOFILE before
    # staging a root worker's binds, whose opens then failed ("Exception occurred in preexec_fn").
    provider = LocalSandboxProvider(timeout=60)
    per_process = min(
        limits.DEFAULT_LIMITS.open_files, int(_file_max() * limits.FILE_MAX_SHARE) // limits.DEFAULT_LIMITS.pids
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, per_process + 256)), hard))
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(per_process + 64)]
    try:
        result = await provider.run_command(
            ["/ift-bin/open_all"], read_only_mounts=[bwrap.ReadOnlyMount(str(open_all), "/ift-bin")]
        )
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.exit_code == 0, result.stderr
    assert 0 < int(result.stdout) <= per_process  # the sandbox's own bound still holds
