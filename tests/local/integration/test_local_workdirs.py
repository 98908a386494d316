"""A worker SIGKILLed in the middle of a step leaves its temp dir; the next provider start removes it."""

from __future__ import annotations

import asyncio
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
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

#: A sleep no other process on the host runs, so the test can see the step running.
_MARKER = "58.7654"
#: A worker whose step has a temp dir (its proxy socket lives there).
_WORKER = f"""
import asyncio, sys
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret
credential = ProxyCredential(Secret("sk-ant-api03-workdirs-test"), "api_key", "http://127.0.0.1:9")
provider = LocalSandboxProvider(temp_dir=sys.argv[1], credential=credential)
asyncio.run(provider.run_command(["sleep", "{_MARKER}"], auth_proxy=True))
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


def test_a_gone_workers_kept_workspace_is_swept_when_a_provider_is_made_and_a_live_one_kept(tmp_path: Path) -> None:
    """Run dirs and retries' kept copies are swept in one scan; a kept copy is swept with no step run."""
    made = f"from ironflow.local import workdirs; print(workdirs.marked_dir({str(tmp_path)!r}, workdirs.KEPT_PREFIX))"
    gone = Path(subprocess.run([sys.executable, "-c", made], capture_output=True, text=True, check=True).stdout.strip())
    assert gone.name.startswith(workdirs.KEPT_PREFIX)
    assert gone.is_dir()  # its process has exited, its kept copy not
    live = Path(workdirs.marked_dir(str(tmp_path), workdirs.KEPT_PREFIX))
    other = tmp_path / "ironflow-other-1"
    other.mkdir()
    LocalSandboxProvider(temp_dir=str(tmp_path))
    assert not gone.exists()
    assert live.is_dir()
    assert other.is_dir()


def _names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


async def test_a_plain_command_makes_no_temp_dir_and_one_with_the_proxy_does(tmp_path: Path) -> None:
    credential = ProxyCredential(Secret("sk-ant-api03-workdirs-test"), "api_key", "http://127.0.0.1:9")
    provider = LocalSandboxProvider(temp_dir=str(tmp_path), credential=credential)
    seen: dict[bool, set[str]] = {}
    for auth_proxy in (False, True):
        task = asyncio.create_task(provider.run_command(["sleep", "1"], auth_proxy=auth_proxy))
        names: set[str] = set()
        while not task.done():
            names |= _names(tmp_path)
            await asyncio.sleep(0.02)
        assert (await task).exit_code == 0
        seen[auth_proxy] = names
    assert seen[False] == set()
    assert len(seen[True]) == 1
    assert next(iter(seen[True])).startswith(workdirs.PREFIX)
    assert _names(tmp_path) == set()
