"""A pool of warm local sessions under real bubblewrap: a session handed out from it is as fresh
as a cold one (nothing of an earlier session, no process of the pre-warm), the pool refills and
replaces what waited too long, a request it does not fit opens cold, and closing leaves nothing."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sessions.integration.serving import cli_env, descendants, ironflow, running, start_serve

from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.local.sessions.starter import WarmSandbox
from ironflow.sessions import CommandResult, OpenOptions, PoolPolicy
from ironflow.workspaces import Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def _pooled(state: Path, policy: PoolPolicy) -> LocalSessions:
    return LocalSandboxProvider().sessions(state_dir=str(state), pool=policy)


@pytest.fixture
async def pooled(state: Path) -> AsyncIterator[LocalSessions]:
    async with _pooled(state, PoolPolicy(1)) as sessions:
        yield sessions


async def _full(sessions: LocalSessions) -> list[WarmSandbox]:
    assert sessions.pool is not None
    await asyncio.wait_for(sessions.pool.full(), 30)
    return list(sessions.pool.waiting())


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _entries(directory: Path) -> list[Path]:
    return list(directory.iterdir())


def _pids(members: list[WarmSandbox]) -> set[int]:
    return {member.proc.pid for member in members}


async def test_a_write_in_a_pooled_session_is_not_in_the_next_one(pooled: LocalSessions) -> None:
    warm = _pids(await _full(pooled))
    first = await pooled.open(OpenOptions(ttl=60))
    assert pooled.host_pids(first.id)[0] in warm, "handed out from the pool"
    wrote = await first.commands.run(["sh", "-c", "echo mine > note; echo mine > /tmp/note; echo $HOME"])
    assert wrote.exit_code == 0, wrote.stderr
    home = wrote.stdout.strip()
    await first.close()
    warm = _pids(await _full(pooled))
    second = await pooled.open(OpenOptions(ttl=60))
    assert pooled.host_pids(second.id)[0] in warm
    found = await second.commands.run(["sh", "-c", f"cat {home}/note /tmp/note"])
    assert found.exit_code != 0
    assert "mine" not in found.stdout
    await second.close()


def _listed(done: CommandResult) -> list[str]:
    """The command lines :data:`_PROCESSES` printed, sorted, the fd numbers bubblewrap and the runtime got left out."""
    lines = done.stdout.splitlines()
    return sorted(re.sub(r"(--listen-fd|--args|--seccomp) \d+", r"\1 N", line) for line in lines)


#: Every process a command sees but its own shell, one command line a line.
_PROCESSES = 'for p in /proc/[0-9]*; do [ "$p" = /proc/$$ ] || { tr "\\0" " " < "$p/cmdline"; echo; }; done'


async def test_a_pooled_session_shows_no_process_of_its_pre_warm_nor_of_an_earlier_session(
    pooled: LocalSessions, state: Path
) -> None:
    """What a command sees in a pooled session is what it sees in a cold one: the sandbox's own
    processes, none left by the pre-warm or by the session handed out before."""
    async with LocalSandboxProvider().sessions(state_dir=str(state)) as cold_sessions:
        cold = await cold_sessions.open(OpenOptions(ttl=60))
        fresh = _listed(await cold.commands.run(["sh", "-c", _PROCESSES]))
        await cold.close()
    await _full(pooled)
    first = await pooled.open(OpenOptions(ttl=60))
    await first.commands.start(["sleep", "300"])
    first_pids = set(pooled.host_pids(first.id))
    warm = _pids(await _full(pooled))
    second = await pooled.open(OpenOptions(ttl=60))
    assert pooled.host_pids(second.id)[0] in warm
    assert not first_pids & set(pooled.host_pids(second.id)), "another sandbox, not the first one's"
    seen = _listed(await second.commands.run(["sh", "-c", _PROCESSES]))
    assert not any("sleep" in line for line in seen), seen
    assert seen == fresh
    await first.close()
    await second.close()


async def test_the_pool_refills_after_a_hand_out_and_hands_the_session_its_env(state: Path) -> None:
    async with _pooled(state, PoolPolicy(2, max_starts=2)) as sessions:
        before = _pids(await _full(sessions))
        assert len(before) == 2
        sandbox = await sessions.open(OpenOptions(ttl=60, env={"GREETING": "hello"}))
        assert sessions.host_pids(sandbox.id)[0] in before
        after = _pids(await _full(sessions))
        assert len(after) == 2
        assert len(after - before) == 1, "one new member replaced the one handed out"
        done = await sandbox.commands.run(["sh", "-c", "echo $GREETING"])
        assert done.stdout == "hello\n", "the session's env goes in at hand-out"
        assert [info.id for info in sessions.held()] == [sandbox.id], "a warm sandbox is no session"
        await sandbox.close()


async def test_a_member_that_waited_past_its_idle_expiry_is_replaced(state: Path) -> None:
    async with _pooled(state, PoolPolicy(1, idle_expiry=1.0)) as sessions:
        old = await _full(sessions)
        deadline = time.monotonic() + 30
        while _pids(old) & _pids(list(sessions.pool.waiting() if sessions.pool else ())):
            assert time.monotonic() < deadline, "the member never expired"
            await asyncio.sleep(0.1)
        new = await _full(sessions)
        assert not _pids(old) & _pids(new)
        for _ in range(50):
            if not any(running(pid) for pid in _pids(old)) and not _exists(old[0].directory):
                break
            await asyncio.sleep(0.1)
        assert not any(running(pid) for pid in _pids(old)), "the expired sandbox is torn down"
        assert not _exists(old[0].directory)


async def test_a_request_the_pool_does_not_fit_opens_cold(pooled: LocalSessions, tmp_path: Path) -> None:
    warm = _pids(await _full(pooled))
    (tmp_path / "ws").mkdir()
    sandbox = await pooled.open(OpenOptions(ttl=60, workspace=Workspace(str(tmp_path / "ws"))))
    assert pooled.host_pids(sandbox.id)[0] not in warm, "a workspace is bound at start: cold"
    assert pooled.pool is not None
    assert _pids(list(pooled.pool.waiting())) == warm, "the warm sandbox still waits"
    await sandbox.close()


async def test_closing_the_pool_leaves_no_process_directory_or_cgroup(state: Path) -> None:
    sessions = _pooled(state, PoolPolicy(2))
    members = await _full(sessions)
    sandbox = await sessions.open(OpenOptions(ttl=60))
    await sandbox.commands.start(["sleep", "300"])
    pids = _pids(members) | set(sessions.host_pids(sandbox.id))
    groups = [d for m in members if m.group is not None for d in m.group.dirs.values()]
    await sessions.aclose()
    await sandbox.disconnect()
    assert not any(running(pid) for pid in pids)
    assert _entries(state) == []
    assert not any(_exists(d) for d in groups)


@pytest.mark.gvisor
@pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed")
async def test_a_gvisor_pool_hands_out_fresh_sandboxes_too(state: Path) -> None:
    """The same pool serves gVisor: a warm runsc sandbox handed out, its env in, nothing of the one before."""
    async with LocalSandboxProvider(isolation="gvisor").sessions(state_dir=str(state), pool=PoolPolicy(1)) as sessions:
        warm = _pids(await _full(sessions))
        first = await sessions.open(OpenOptions(ttl=60, env={"GREETING": "hello"}))
        assert sessions.host_pids(first.id)[0] in warm
        wrote = await first.commands.run(["sh", "-c", "echo $GREETING > note; cat note"])
        assert wrote.stdout == "hello\n", wrote.stderr
        await first.close()
        warm = _pids(await _full(sessions))
        second = await sessions.open(OpenOptions(ttl=60))
        assert sessions.host_pids(second.id)[0] in warm
        assert (await second.commands.run(["cat", "note"])).exit_code != 0
        await second.close()
    assert _entries(state) == []


def test_serve_keeps_a_pool_and_a_bad_pool_option_is_one_line_and_exit_2() -> None:
    env = cli_env(IRONFLOW_SANDBOX_TOKEN="pool-test-token-0123456789abcdef")
    server = start_serve(env, "--pool", "1", "--pool-idle-expiry", "5m")
    try:
        deadline = time.monotonic() + 30
        while not descendants(server.proc.pid):
            assert time.monotonic() < deadline, "no warm sandbox under the server"
            time.sleep(0.1)
        opened = ironflow("sandbox", "open", env=server.env)
        assert opened.returncode == 0, opened.stderr
        done = ironflow("sandbox", "exec", opened.stdout.strip(), "--", "echo", "ok", env=server.env)
        assert (done.returncode, done.stdout) == (0, "ok\n")
        pids = descendants(server.proc.pid)
    finally:
        assert server.stop() == 0
        server.proc.communicate()
    assert not any(running(pid) for pid in pids), "no warm sandbox outlives the server"
    for args, text in (
        (["--pool", "1", "--pool-idle-expiry", "soon"], "invalid duration 'soon'"),
        (["--pool", "1", "--backend", "k8s"], "--pool is for --backend local"),
    ):
        done = ironflow("sandbox", "serve", "--port", "0", *args, env=env, timeout=30)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().startswith("error: ")
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert text in done.stderr
