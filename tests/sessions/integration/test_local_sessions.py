"""Local sessions under real bubblewrap: one sandbox, many commands and files, and nothing of it
left once it closes, expires, or its supervisor is SIGKILLed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions import LocalSessions
from ironflow.sessions import Exit, Output, SessionNotFound

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A short directory: a unix socket path holds at most 107 bytes."""
    short = Path(tempfile.mkdtemp(prefix="ifs-test-"))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
async def sessions(state: Path) -> AsyncIterator[LocalSessions]:
    async with LocalSessions(state_dir=str(state)) as opened:
        yield opened


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def _entries(directory: Path) -> list[Path]:
    return list(directory.iterdir())


def _gone(pids: list[int]) -> bool:
    return not any(_running(pid) for pid in pids)


async def test_commands_run_one_after_another_in_the_same_sandbox(sessions: LocalSessions) -> None:
    async with await sessions.open(ttl=60) as sandbox:
        first = await sandbox.commands.run(["sh", "-c", "echo kept > note; id -u; pwd"])
        assert first.exit_code == 0
        assert first.stdout.split() == ["10001", "/home/claude"]
        again = await sandbox.commands.run("cat note")
        assert again.stdout == "kept\n"
        env = await sandbox.commands.run(["sh", "-c", "echo $A; cat"], env={"A": "1"}, stdin="in", cwd=".")
        assert env.stdout == "1\nin"
        failed = await sandbox.commands.run(["sh", "-c", "exit 7"])
        assert failed.exit_code == 7
        assert not failed.timed_out
        missing = await sandbox.commands.run("no-such-tool")
        assert missing.exit_code == 127
        slow = await sandbox.commands.run("sleep 10", timeout=0.3)
        assert slow.timed_out


async def test_the_sandbox_has_no_network_and_no_token_in_its_environment(sessions: LocalSessions) -> None:
    async with await sessions.open(ttl=60) as sandbox:
        links = await sandbox.commands.run(["cat", "/proc/net/dev"])
        assert [line.split(":")[0].strip() for line in links.stdout.splitlines()[2:]] == ["lo"]
        _, token = sessions.route(sandbox.id)
        env = await sandbox.commands.run(
            ["sh", "-c", "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'"]
        )
        assert token.reveal() not in env.stdout


async def test_streaming_callbacks_and_background_commands(sessions: LocalSessions) -> None:
    async with await sessions.open(ttl=60) as sandbox:
        events = [e async for e in sandbox.commands.stream(["sh", "-c", "echo a; echo b >&2; exit 2"])]
        assert Output("stdout", "a\n") in events
        assert Output("stderr", "b\n") in events
        assert events[-1] == Exit(2, False)
        seen: list[str] = []
        await sandbox.commands.run(["echo", "hi"], on_stdout=seen.append)
        assert seen == ["hi\n"]
        done = await sandbox.commands.start(["sh", "-c", "sleep 0.2; echo late"])
        assert (await done.wait()).stdout == "late\n"
        forever = await sandbox.commands.start(["sleep", "60"])
        assert await forever.kill() is True
        assert (await forever.wait()).exit_code == 137


async def test_files_and_directories_move_in_and_out_confined(sessions: LocalSessions, tmp_path: Path) -> None:
    async with await sessions.open(ttl=60) as sandbox:
        assert await sandbox.files.write("d/e/f.txt", "hello") == 5
        assert await sandbox.files.read("d/e/f.txt") == b"hello"
        assert [(e.name, e.type) for e in await sandbox.files.list("d")] == [("e", "directory")]
        assert await sandbox.files.exists("d/e/f.txt")
        assert not await sandbox.files.exists("nope")
        await sandbox.files.mkdir("empty")
        await sandbox.files.remove("d", recursive=True)
        assert not await sandbox.files.exists("d")
        with pytest.raises(FileNotFoundError):
            await sandbox.files.read("d/e/f.txt")
        for bad in ("../../etc/passwd", "/etc/passwd"):
            with pytest.raises(PermissionError):
                await sandbox.files.read(bad)
        await sandbox.commands.run(["ln", "-s", "/etc", "link"])
        with pytest.raises(PermissionError):
            await sandbox.files.read("link/hostname")
        source = tmp_path / "tree"
        (source / "sub").mkdir(parents=True)
        (source / "sub" / "x.txt").write_text("x")
        assert await sandbox.files.upload_dir(str(source), "copied") >= 3
        assert (await sandbox.commands.run("cat copied/sub/x.txt")).stdout == "x"
        back = tmp_path / "back"
        await sandbox.files.download_dir("copied", str(back))
        assert _entries(back / "sub") == [back / "sub" / "x.txt"]
        with pytest.raises(errors.ConfigError):
            await sandbox.files.download_dir("copied", str(tmp_path / "small"), max_bytes=100)


async def test_closing_kills_every_process_of_the_session(sessions: LocalSessions, state: Path) -> None:
    sandbox = await sessions.open(ttl=60, labels={"team": "a"}, run_id="run-1")
    await sandbox.commands.start(["sh", "-c", "sleep 300 & sleep 300"])
    await asyncio.sleep(0.2)
    pids = sessions.host_pids(sandbox.id)
    assert len(pids) >= 4
    assert [i.id for i in sessions.list()] == [sandbox.id]
    assert sessions.list()[0].labels == {"team": "a"}
    assert await sessions.close_run("run-1") == 1
    assert _gone(pids)
    assert sessions.list() == []
    assert _entries(state) == []
    with pytest.raises(SessionNotFound):
        sessions.connect(sandbox.id)
    await sandbox.close()  # twice is no error
    await sandbox.disconnect()


async def test_a_session_ends_at_its_ttl_and_when_idle(sessions: LocalSessions) -> None:
    sandbox = await sessions.open(ttl=0.5)
    pids = sessions.host_pids(sandbox.id)
    await asyncio.sleep(1.5)
    assert sessions.list() == []
    assert _gone(pids)
    await sandbox.disconnect()
    idle = await sessions.open(ttl=60, idle_timeout=0.5)
    await asyncio.sleep(2.5)
    assert sessions.list() == []
    await idle.disconnect()


async def test_a_handle_reattaches_by_id(sessions: LocalSessions) -> None:
    sandbox = await sessions.open(ttl=60)
    await sandbox.files.write("x", "1")
    await sandbox.disconnect()
    again = sessions.connect(sandbox.id)
    assert await again.files.read("x") == b"1"
    await again.close()


_SUPERVISOR = """
import asyncio, json, sys
from ironflow.local.sessions import LocalSessions
async def main():
    sessions = LocalSessions(state_dir=sys.argv[1])
    sandbox = await sessions.open(ttl=600)
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


def test_gvisor_sessions_are_refused_until_built() -> None:
    with pytest.raises(errors.ConfigError, match="gVisor sessions are not built yet"):
        LocalSessions(LocalSandboxProvider(isolation="gvisor"))
