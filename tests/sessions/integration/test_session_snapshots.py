"""Snapshots, forks, pause, idle suspend and extend of local sessions under real bubblewrap (issue 32):
forks see the parent's files and keep their own writes, a snapshot outlives its session byte for
byte, a hostile session's files give no host file, a paused session's processes stop."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions.freezer import Freezer
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.local.sessions.snapshots import SnapshotStore
from ironflow.sessions import OpenOptions, PoolPolicy
from ironflow.sessions.client import AsyncSandbox
from ironflow.testing.processes import running
from ironflow.workspaces import Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

#: A loop that writes a growing count into the workspace, read from the host (no request is made).
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; sleep 0.01; done"


@pytest.fixture
def store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(str(tmp_path / "snapshots"), limit_bytes=64 << 20)


class _Sessions(LocalSessions):
    """Local sessions whose every handle is disconnected at the end (a test keeps many)."""

    handles: list[AsyncSandbox]

    async def open(self, options: OpenOptions | None = None, *, agent: bool = False) -> AsyncSandbox:
        handle = await super().open(options, agent=agent)
        self.handles.append(handle)
        return handle

    async def fork(self, session_id: str, *, count: int = 1) -> list[AsyncSandbox]:
        handles = await super().fork(session_id, count=count)
        self.handles += handles
        return handles


@pytest.fixture
async def sessions(state: Path, store: SnapshotStore) -> AsyncIterator[LocalSessions]:
    opened = _Sessions(LocalSandboxProvider(), state_dir=str(state), snapshot_store=store)
    opened.handles = []
    try:
        yield opened
    finally:
        for handle in opened.handles:
            await handle.disconnect()
        await opened.aclose()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('parent')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    (root / "run.sh").chmod(0o755)
    return root


def _count(state: Path) -> int:
    """The counter of the one session's workspace, read on the host."""
    (found,) = state.glob("ifs-*/workspace/count")
    return int(found.read_text() or 0)


async def _sh(sandbox: AsyncSandbox, script: str) -> str:
    result = await sandbox.commands.run(["sh", "-c", script])
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_ten_forks_see_the_parents_files_and_keep_their_own_writes(sessions: LocalSessions, repo: Path) -> None:
    parent = await sessions.open(OpenOptions(ttl=300, workspace=Workspace(str(repo))))
    await _sh(parent, "echo state > made.txt && mkdir -p ~/cache && echo home > ~/cache/h.txt")

    forks = await sessions.fork(parent.id, count=10)

    assert len({f.id for f in forks}) == 10
    for n, fork in enumerate(forks):
        seen = await _sh(fork, "cat made.txt src/main.py ~/cache/h.txt && stat -c %a run.sh")
        assert seen == "state\nprint('parent')\nhome\n755\n"
        await _sh(fork, f"echo fork{n} > made.txt && echo {n} > ~/cache/h.txt && touch only{n}")
    for n, fork in enumerate(forks):
        assert await _sh(fork, "cat made.txt ~/cache/h.txt && ls | grep only") == f"fork{n}\n{n}\nonly{n}\n"
    assert await _sh(parent, "cat made.txt ~/cache/h.txt && ls | grep -c only || true") == "state\nhome\n0\n"
    assert (repo / "src" / "main.py").read_text() == "print('parent')\n"  # the host directory untouched
    patch = (await sessions.changes(forks[3].id)).patch.decode()
    assert "+fork3" in patch  # a fork's changes are against the parent's host directory, as the parent's are
    assert "only3" in patch
    await sessions.changes(forks[3].id, apply=True)
    assert (repo / "made.txt").read_text() == "fork3\n"
    with pytest.raises(errors.WorkspaceConflict):
        await sessions.changes(forks[4].id, apply=True)  # the host moved under the second fork's apply
    assert await sessions.snapshots() == []  # a fork copies straight from its parent


async def test_a_snapshot_outlives_its_session_and_restores_byte_for_byte_with_modes(
    sessions: LocalSessions, repo: Path
) -> None:
    blob = os.urandom(300_000)
    parent = await sessions.open(OpenOptions(ttl=300, workspace=Workspace(str(repo))))
    await parent.files.write("data/blob.bin", blob)
    await _sh(parent, "chmod 600 data/blob.bin && chmod 750 data && ln -s src/main.py link && echo h > ~/h")
    taken = await sessions.snapshot(parent.id, name="before-close")
    await parent.close()

    listed = await sessions.snapshots()
    assert [(s.id, s.name, s.session_id) for s in listed] == [(taken.id, "before-close", parent.id)]
    assert taken.trees == ("workspace", "home")
    assert taken.size_bytes >= len(blob)
    restored = await sessions.open(OpenOptions(ttl=300, from_snapshot=taken.id))
    assert await restored.files.read("data/blob.bin") == blob
    with pytest.raises(errors.ConfigError, match="base of open session"):
        await sessions.remove_snapshot(taken.id)
    (grandchild,) = await sessions.fork(restored.id)  # a fork of it diffs against the snapshot too
    for opened in (restored, grandchild):
        with pytest.raises(errors.WorkspaceRefused, match="no host directory"):
            await sessions.changes(opened.id, apply=True)
    await grandchild.close()
    assert await _sh(restored, "stat -c '%a %n' data data/blob.bin run.sh && readlink link && cat ~/h") == (
        "750 data\n600 data/blob.bin\n755 run.sh\nsrc/main.py\nh\n"
    )
    await restored.close()
    assert await sessions.remove_snapshot(taken.id) is True
    assert await sessions.snapshots() == []


async def test_a_hostile_session_gives_no_host_file_and_a_clear_refusal(
    sessions: LocalSessions, store: SnapshotStore
) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=300))
    await _sh(sandbox, "ln -s /etc/shadow shadow && ln -s /root home-link && ln -s ../../../etc passwd-dir")
    taken = await sessions.snapshot(sandbox.id)
    home = Path(store.directory) / taken.id / "home"
    assert {p.name: os.readlink(p) for p in home.iterdir()} == {
        "shadow": "/etc/shadow",
        "home-link": "/root",
        "passwd-dir": "../../../etc",
    }  # links kept as links: no byte of a host file came in
    assert all(stat.S_ISLNK(p.lstat().st_mode) for p in home.iterdir())

    refusals = {
        "mkfifo pipe": "'home/pipe' is a FIFO",
        "echo x > a && ln a b": "is a hard link (2 names)",
        "truncate -s 100M sparse": "'home/sparse' (104857600 bytes) takes the snapshot past the store's limit",
    }
    for script, words in refusals.items():
        await _sh(sandbox, "rm -f pipe a b sparse && " + script)
        with pytest.raises(errors.WorkspaceRefused) as caught:
            await sessions.snapshot(sandbox.id)
        assert words in str(caught.value)
        assert "\n" not in str(caught.value)
        if "sparse" not in script:  # a fork has no store limit, the other two refuse it too
            with pytest.raises(errors.WorkspaceRefused, match=r"is a FIFO|is a hard link"):
                await sessions.fork(sandbox.id)
            assert [info.id for info in await sessions.list()] == [sandbox.id]  # no fork left behind
    assert [s.id for s in await sessions.snapshots()] == [taken.id]  # nothing of a refused one is left
    assert sorted(os.listdir(store.directory)) == [taken.id]


async def test_pause_freezes_the_session_and_resume_continues(sessions: LocalSessions, repo: Path, state: Path) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=300, workspace=Workspace(str(repo))))
    await sandbox.commands.start(["sh", "-c", COUNTER])
    await asyncio.sleep(0.5)

    info = await sessions.pause(sandbox.id)
    frozen_at = _count(state)
    await asyncio.sleep(0.5)
    assert info.paused
    assert _count(state) == frozen_at
    assert (await sessions.list())[0].paused

    await sessions.resume(sandbox.id)
    await asyncio.sleep(0.5)
    assert _count(state) > frozen_at

    pids = sessions.host_pids(sandbox.id)
    await sessions.pause(sandbox.id)
    assert await sessions.close(sandbox.id)  # a paused session closes: every process of it dies
    assert not [pid for pid in pids if running(pid)]


async def test_sigstop_pauses_a_sandbox_without_a_freezer(sessions: LocalSessions, repo: Path, state: Path) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=300, workspace=Workspace(str(repo))))
    await sandbox.commands.start(["sh", "-c", COUNTER])
    await asyncio.sleep(0.5)
    (pid,) = [p for p in sessions.host_pids(sandbox.id)][:1]
    stopper = Freezer(pid, None)  # the fallback: SIGSTOP down the process tree
    assert stopper.method == "SIGSTOP"

    await stopper.pause()
    frozen_at = _count(state)
    await asyncio.sleep(0.5)
    assert _count(state) == frozen_at
    await stopper.resume()
    await asyncio.sleep(0.5)
    assert _count(state) > frozen_at


async def test_an_idle_session_is_suspended_and_the_next_request_resumes_it(
    sessions: LocalSessions, repo: Path, state: Path
) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=300, workspace=Workspace(str(repo)), idle_suspend=1.0))
    await sandbox.files.write("kept.txt", "kept")
    await sandbox.commands.start(["sh", "-c", COUNTER])
    deadline = time.monotonic() + 10
    while not (await sessions.list())[0].paused:
        assert time.monotonic() < deadline, "never suspended"
        await asyncio.sleep(0.2)
    frozen_at = _count(state)
    await asyncio.sleep(0.5)
    assert _count(state) == frozen_at

    assert await sandbox.files.read("kept.txt") == b"kept"  # the request resumes it
    assert not (await sessions.list())[0].paused
    await asyncio.sleep(0.3)
    assert _count(state) > frozen_at


async def test_extend_moves_the_expiry(sessions: LocalSessions) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=2))
    info = await sessions.extend(sandbox.id, 60)
    assert info.expires_at > time.time() + 50
    await asyncio.sleep(3)  # past the first TTL: it lives on
    assert await _sh(sandbox, "echo alive") == "alive\n"
    await sessions.extend(sandbox.id, 0.5)
    await asyncio.sleep(1.5)
    assert await sessions.list() == []


@pytest.mark.gvisor
@pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed")
async def test_gvisor_sessions_fork_and_pause_with_their_workspace_and_refuse_a_home_snapshot(
    state: Path, store: SnapshotStore, repo: Path
) -> None:
    async with LocalSessions(
        LocalSandboxProvider(isolation="gvisor"), state_dir=str(state), snapshot_store=store
    ) as gvisor:
        parent = await gvisor.open(OpenOptions(ttl=300, workspace=Workspace(str(repo))))
        await _sh(parent, "echo parent > made.txt")
        forks = await gvisor.fork(parent.id, count=2)
        for n, fork in enumerate(forks):
            assert await _sh(fork, f"cat made.txt && echo {n} > made.txt && cat made.txt") == f"parent\n{n}\n"
            await fork.disconnect()
        assert await _sh(parent, "cat made.txt") == "parent\n"
        assert [s.trees for s in await gvisor.snapshots()] == [("workspace",)]  # gVisor's fork goes by the store

        await parent.commands.start(["sh", "-c", COUNTER])
        await asyncio.sleep(0.5)
        await gvisor.pause(parent.id)
        frozen_at = _count(state)
        await asyncio.sleep(0.5)
        assert _count(state) == frozen_at
        await gvisor.resume(parent.id)
        await asyncio.sleep(0.5)
        assert _count(state) > frozen_at

        bare = await gvisor.open(OpenOptions(ttl=60))
        with pytest.raises(errors.ConfigError, match="gVisor's own memory"):
            await gvisor.snapshot(bare.id)
        await bare.disconnect()
        await parent.disconnect()


async def test_a_suspended_session_still_ends_at_its_idle_timeout(sessions: LocalSessions) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=300, idle_suspend=0.3, idle_timeout=3))
    await asyncio.sleep(1.5)
    assert (await sessions.list())[0].paused
    assert await _sh(sandbox, "echo awake") == "awake\n"  # resumed, and the idle clock starts again
    deadline = time.monotonic() + 15
    while await sessions.list():
        assert time.monotonic() < deadline, "never ended"
        await asyncio.sleep(0.3)


async def test_a_home_snapshot_opens_in_a_warm_sandbox_of_the_pool(state: Path, store: SnapshotStore) -> None:
    pooled = LocalSessions(LocalSandboxProvider(), state_dir=str(state), snapshot_store=store, pool=PoolPolicy(1))
    async with pooled:
        pooled.prewarm()
        assert pooled.pool is not None
        async with await pooled.open(OpenOptions(ttl=60)) as parent:
            await _sh(parent, "mkdir -p notes && echo kept > notes/n.txt && chmod 604 notes/n.txt")
            taken = await pooled.snapshot(parent.id)
        await asyncio.wait_for(pooled.pool.full(), 30)
        async with await pooled.open(OpenOptions(ttl=60, from_snapshot=taken.id)) as restored:
            assert await _sh(restored, "cat notes/n.txt && stat -c %a notes/n.txt") == "kept\n604\n"
