"""A worker SIGKILLed in the middle of a step leaves its temp dir; the next provider start removes it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ironflow.local import workdirs
from ironflow.local.provider import LocalSandboxProvider

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

#: A sleep no other process on the host runs, so the test can see the step running.
_MARKER = "58.7654"
_WORKER = f"""
import asyncio, sys
from ironflow.local.provider import LocalSandboxProvider
asyncio.run(LocalSandboxProvider(temp_dir=sys.argv[1]).run_command(["sleep", "{_MARKER}"]))
"""


def _step_running() -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == f"sleep\0{_MARKER}\0".encode():
                    return True
        except OSError:
            continue
    return False


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_killed_workers_temp_dir_is_swept_at_the_next_start_and_a_live_one_kept(tmp_path: Path) -> None:
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(tmp_path)])
    try:
        _wait_for("the worker's step to run", _step_running)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    [stale] = list(tmp_path.glob(f"{workdirs.PREFIX}*"))  # the worker could not remove it
    with workdirs.run_dir(str(tmp_path)) as live:
        LocalSandboxProvider(temp_dir=str(tmp_path))
        assert not stale.exists()
        assert os.path.isdir(live)
    _wait_for("the killed worker's sandbox to end", lambda: not _step_running())
