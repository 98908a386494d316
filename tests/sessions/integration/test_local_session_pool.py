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
from tests.sessions.integration.serving import cli_env, ironflow, start_serve

from ironflow import egress
from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.local.sessions.snapshots import SnapshotStore
from ironflow.local.sessions.starter import WarmSandbox
from ironflow.sessions import CommandResult, OpenOptions, PoolPolicy
from ironflow.testing.processes import descendants, running
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


async def test_a_request_the_pool_does_not_fit_opens_cold(pooled: LocalSessions) -> None:
    warm = _pids(await _full(pooled))
    allow = egress.EgressPolicy(allow=(egress.parse_allow_host("127.0.0.2:9"),))
    sandbox = await pooled.open(OpenOptions(ttl=60, egress=allow))
    assert pooled.host_pids(sandbox.id)[0] not in warm, "an egress relay is bound at start: cold"
    assert pooled.pool is not None
    assert _pids(list(pooled.pool.waiting())) == warm, "the warm sandbox still waits"
    await sandbox.close()


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "note").write_text("host\n")
    (root / "sub" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "sub" / "run.sh", 0o750)  # noqa: S103 (modes a copy must keep)
    os.chmod(root / "sub", 0o710)  # noqa: S103
    os.chmod(root, 0o750)  # noqa: S103
    return root


def _shape(copy: str) -> list[tuple[str, int, int, int]]:
    """Every path of a session's host copy with its mode, owner and group."""
    out = []
    for where, dirs, files in os.walk(copy):
        for name in ["", *dirs, *files]:
            path = os.path.join(where, name) if name else where
            st = os.lstat(path)
            out.append((os.path.relpath(path, copy), st.st_mode, st.st_uid, st.st_gid))
    return sorted(out)


@pytest.fixture
async def both(state: Path, tmp_path: Path) -> AsyncIterator[LocalSessions]:
    """A pool of one plain member and one with an empty workspace bound (snapshots in the test's own store)."""
    store = SnapshotStore(str(tmp_path / "snapshots"))
    pool = PoolPolicy(2, workspaces=1)
    async with LocalSessions(LocalSandboxProvider(), state_dir=str(state), pool=pool, snapshot_store=store) as sessions:
        yield sessions
    assert _entries(state) == [], "every member and session directory is gone"


async def _bound(sessions: LocalSessions) -> set[int]:
    """The pids of the members with a workspace bound, once both pools are full."""
    assert sessions.workspace_pool is not None
    await _full(sessions)
    await asyncio.wait_for(sessions.workspace_pool.full(), 30)
    return _pids(list(sessions.workspace_pool.waiting()))


async def test_a_workspace_session_is_handed_a_warm_sandbox_filled_as_a_cold_one(
    both: LocalSessions, state: Path, tmp_path: Path
) -> None:
    """The warm sandbox's bound directory is filled with the copy a cold open makes (owner, mode),
    the session serves from /workspace, and its diff and snapshot are a cold one's."""
    repo = _tree(tmp_path / "repo")
    async with LocalSandboxProvider().sessions(state_dir=str(state)) as cold_sessions:
        cold = await cold_sessions.open(OpenOptions(ttl=60, workspace=Workspace(str(repo))))
        cold_copy = cold_sessions._get(cold.id).workspace
        assert cold_copy is not None
        cold_shape = _shape(cold_copy.copy)
        await cold.close()
    warm = await _bound(both)
    sandbox = await both.open(OpenOptions(ttl=60, workspace=Workspace(str(repo))))
    assert both.host_pids(sandbox.id)[0] in warm, "handed out from the pool"
    prepared = both._get(sandbox.id).workspace
    assert prepared is not None
    assert _shape(prepared.copy) == cold_shape
    done = await sandbox.commands.run(["sh", "-c", "pwd; cat note; echo mine > new; echo more >> note"])
    assert done.stdout == "/workspace\nhost\n", done.stderr
    assert (await sandbox.files.read("new")) == b"mine\n"
    changes = await both.changes(sandbox.id)
    assert sorted(c.path for c in changes.files) == ["new", "note"]
    taken = await both.snapshot(sandbox.id)
    assert "workspace" in taken.trees
    await both.remove_snapshot(taken.id)
    await sandbox.close()
    assert (repo / "note").read_text() == "host\n", "the host directory is only read"


async def test_a_fork_from_the_pool_has_its_parents_files_and_keeps_its_writes(
    both: LocalSessions, tmp_path: Path
) -> None:
    """A fork handed a warm sandbox sees the parent's files; what it writes, the parent and the next
    pooled sessions (with a workspace or without) never see."""
    repo = _tree(tmp_path / "repo")
    await _bound(both)
    parent = await both.open(OpenOptions(ttl=60, workspace=Workspace(str(repo))))
    assert (await parent.commands.run(["sh", "-c", "echo parent > mine; echo home > ~/at-home"])).exit_code == 0
    warm = await _bound(both)
    (child,) = await both.fork(parent.id)
    assert both.host_pids(child.id)[0] in warm, "the fork is handed out from the pool"
    seen = await child.commands.run(["sh", "-c", "cat note mine ~/at-home; echo child > theirs; echo c > ~/c"])
    assert seen.stdout == "host\nparent\nhome\n", seen.stderr
    assert (await parent.commands.run(["cat", "theirs", "/home/claude/c"])).exit_code != 0, "the fork's writes"
    changed = await both.changes(child.id)
    assert sorted(c.path for c in changed.files) == ["mine", "theirs"], "against the parent's base"
    await child.close()
    warm = await _bound(both)
    again = await both.open(OpenOptions(ttl=60, workspace=Workspace(str(repo))))
    assert both.host_pids(again.id)[0] in warm
    found = await again.commands.run(["sh", "-c", "ls -A; cat ~/c ~/at-home"])
    assert found.stdout == "note\nsub\n", found.stdout
    assert found.exit_code != 0
    plain = await both.open(OpenOptions(ttl=60))
    assert both.host_pids(plain.id)[0] not in warm, "a plain session takes a plain member"
    found = await plain.commands.run(["sh", "-c", "ls -A /workspace; cat ~/c ~/at-home"])
    assert (found.stdout, found.exit_code != 0) == ("", True)
    for handle in (again, plain, parent):
        await handle.close()


async def test_a_snapshot_with_a_workspace_opens_in_a_warm_sandbox_and_diffs_against_it(
    both: LocalSessions, tmp_path: Path
) -> None:
    repo = _tree(tmp_path / "repo")
    await _bound(both)
    parent = await both.open(OpenOptions(ttl=60, workspace=Workspace(str(repo))))
    assert (await parent.commands.run(["sh", "-c", "echo kept > kept"])).exit_code == 0
    taken = await both.snapshot(parent.id)
    await parent.close()
    warm = await _bound(both)
    restored = await both.open(OpenOptions(ttl=60, from_snapshot=taken.id))
    assert both.host_pids(restored.id)[0] in warm, "handed out from the pool"
    done = await restored.commands.run(["sh", "-c", "pwd; cat kept note; echo new > new"])
    assert done.stdout == "/workspace\nkept\nhost\n", done.stderr
    assert [c.path for c in (await both.changes(restored.id)).files] == ["new"], "against the snapshot"
    await restored.close()
    await both.remove_snapshot(taken.id)


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


def test_serve_keeps_a_pool_and_a_bad_pool_option_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env = cli_env(IRONFLOW_SANDBOX_TOKEN="pool-test-token-0123456789abcdef")
    server = start_serve(env, "--pool", "2", "--pool-workspaces", "1", "--pool-idle-expiry", "5m")
    try:
        deadline = time.monotonic() + 30
        while not descendants(server.proc.pid):
            assert time.monotonic() < deadline, "no warm sandbox under the server"
            time.sleep(0.1)
        opened = ironflow("sandbox", "open", env=server.env)
        assert opened.returncode == 0, opened.stderr
        done = ironflow("sandbox", "exec", opened.stdout.strip(), "--", "echo", "ok", env=server.env)
        assert (done.returncode, done.stdout) == (0, "ok\n")
        (tmp_path / "f").write_text("from the host\n")
        with_dir = ironflow("sandbox", "open", "--workspace", str(tmp_path), env=server.env)  # --pool-workspaces'
        assert with_dir.returncode == 0, with_dir.stderr
        forked = ironflow("sandbox", "fork", with_dir.stdout.strip(), env=server.env)
        assert forked.returncode == 0, forked.stderr
        done = ironflow("sandbox", "exec", forked.stdout.split()[0], "--", "cat", "/workspace/f", env=server.env)
        assert (done.returncode, done.stdout) == (0, "from the host\n"), done.stderr
        pids = descendants(server.proc.pid)
    finally:
        assert server.stop() == 0
        server.proc.communicate()
    assert not any(running(pid) for pid in pids), "no warm sandbox outlives the server"
    for args, text in (
        (["--pool", "1", "--pool-idle-expiry", "soon"], "invalid duration 'soon'"),
        (["--pool", "1", "--backend", "k8s"], "--pool is for --backend local"),
        (["--pool", "1", "--pool-workspaces", "2"], "--pool-workspaces 2: at most --pool (1)"),
    ):
        done = ironflow("sandbox", "serve", "--port", "0", *args, env=env, timeout=30)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().startswith("error: ")
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert text in done.stderr
