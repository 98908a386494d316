"""Local sessions under real bubblewrap, what only they have: no network, uid 10001, every host
process of a session killed on close, and nothing left once its supervisor is SIGKILLed. The
contract every backend keeps is ``test_session_contract.py``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions, SessionNotFound
from ironflow.testing.processes import running

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
async def sessions(state: Path) -> AsyncIterator[LocalSessions]:
    async with LocalSessions(LocalSandboxProvider(), state_dir=str(state)) as opened:
        yield opened


def _entries(directory: Path) -> list[Path]:
    return list(directory.iterdir())


def _gone(pids: list[int]) -> bool:
    return not any(running(pid) for pid in pids)


async def test_the_sandbox_has_no_network_and_no_token_in_its_environment(sessions: LocalSessions) -> None:
    async with await sessions.open(OpenOptions(ttl=60)) as sandbox:
        assert (await sandbox.commands.run(["id", "-u"])).stdout == "10001\n"
        links = await sandbox.commands.run(["cat", "/proc/net/dev"])
        assert [line.split(":")[0].strip() for line in links.stdout.splitlines()[2:]] == ["lo"]
        _, token = sessions.route(sandbox.id)
        env = await sandbox.commands.run(
            ["sh", "-c", "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'"]
        )
        assert token.reveal() not in env.stdout


async def test_closing_kills_every_process_of_the_session(sessions: LocalSessions, state: Path) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=60, labels={"team": "a"}, run_id="run-1"))
    await sandbox.commands.start(["sh", "-c", "sleep 300 & sleep 300"])
    await asyncio.sleep(0.2)
    pids = sessions.host_pids(sandbox.id)
    assert len(pids) >= 4
    assert [i.id for i in sessions.held()] == [sandbox.id]
    assert sessions.held()[0].labels == {"team": "a"}
    assert await sessions.release_run("run-1") == 1
    assert _gone(pids)
    assert sessions.held() == []
    assert _entries(state) == []
    with pytest.raises(SessionNotFound):
        await sessions.connect(sandbox.id)
    await sandbox.close()  # twice is no error
    await sandbox.disconnect()


_SUPERVISOR = """
import asyncio, json, sys
from ironflow.local import LocalSandboxProvider
from ironflow.sessions import OpenOptions
async def main():
    sessions = LocalSandboxProvider().sessions(state_dir=sys.argv[1])
    sandbox = await sessions.open(OpenOptions(ttl=600))
    await sandbox.commands.start(["sh", "-c", "sleep 600 & sleep 600"])
    await asyncio.sleep(0.3)
    print(json.dumps({"id": sandbox.id, "pids": sessions.host_pids(sandbox.id)}), flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def test_sigkill_of_the_supervisor_leaves_no_process_and_the_directory_is_swept(state: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    proc = subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(state)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        doc = json.loads(proc.stdout.readline())
        assert len(doc["pids"]) >= 4
        assert len(_entries(state)) == 1
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    for _ in range(100):
        if _gone(doc["pids"]):
            break
        time.sleep(0.05)
    assert _gone(doc["pids"])
    LocalSessions(LocalSandboxProvider(), state_dir=str(state))  # the next one on the machine sweeps
    assert _entries(state) == []


def test_gvisor_sessions_without_runsc_are_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no runsc on this host
    with pytest.raises(errors.SandboxError, match=r"^runsc is not installed: install it"):
        LocalSessions(LocalSandboxProvider(isolation="gvisor"), state_dir=str(tmp_path))
