"""A local session opened on a workspace, under real bubblewrap and gVisor: the runtime works in a private
copy at /workspace, the host tree is untouched until an apply, and ``changes`` is the patch of
everything the session's commands changed since open."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions
from ironflow.workspaces import Workspace

pytestmark = [pytest.mark.bwrap]


@pytest.fixture(params=WORKSPACE_ISOLATIONS)
async def sessions(state: Path, request: pytest.FixtureRequest) -> AsyncIterator[LocalSessions]:
    provider = LocalSandboxProvider(isolation=request.param)
    async with LocalSessions(provider, state_dir=str(state)) as opened:
        yield opened


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "old.txt").write_text("gone soon\n")
    return repo


async def test_commands_work_in_a_private_copy_and_changes_is_their_patch(
    sessions: LocalSessions, tmp_path: Path
) -> None:
    repo = _repo(tmp_path)
    sandbox = await sessions.open(OpenOptions(workspace=Workspace(str(repo))))
    where = await sandbox.commands.run(["pwd"])
    assert where.stdout.strip() == "/workspace"
    await sandbox.commands.run(["sh", "-c", 'sed -i "s/a - b/a + b/" calc.py && rm old.txt'])
    await sandbox.files.write("new/notes.md", "hello\n")
    assert (repo / "calc.py").read_text().endswith("a - b\n")  # the host tree is untouched

    found = await sessions.changes(sandbox.id)

    assert {(f.path, f.change) for f in found.files} == {
        ("calc.py", "modified"),
        ("old.txt", "deleted"),
        ("new/notes.md", "added"),
    }
    assert b"+    return a + b" in found.patch
    assert (repo / "old.txt").exists()
    await sandbox.close()


async def test_apply_writes_the_change_into_the_host_directory(sessions: LocalSessions, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    sandbox = await sessions.open(OpenOptions(workspace=Workspace(str(repo))))
    await sandbox.commands.run(["sh", "-c", 'sed -i "s/a - b/a + b/" calc.py'])

    applied = await sessions.changes(sandbox.id, apply=True)

    assert [f.path for f in applied.files] == ["calc.py"]
    assert (repo / "calc.py").read_text().endswith("a + b\n")
    await sandbox.close()


async def test_the_copy_is_gone_after_close(sessions: LocalSessions, state: Path, tmp_path: Path) -> None:
    sandbox = await sessions.open(OpenOptions(workspace=Workspace(str(_repo(tmp_path)))))
    await sandbox.close()
    assert os.listdir(state) == []
    with pytest.raises(errors.UsageError):
        await sessions.changes(sandbox.id)


async def test_a_session_without_a_workspace_has_no_changes(sessions: LocalSessions) -> None:
    sandbox = await sessions.open()
    with pytest.raises(errors.ConfigError, match="without a workspace"):
        await sessions.changes(sandbox.id)
    await sandbox.close()


async def test_a_source_with_a_fifo_is_refused_before_the_session_starts(
    sessions: LocalSessions, tmp_path: Path, state: Path
) -> None:
    repo = _repo(tmp_path)
    os.mkfifo(repo / "pipe")
    with pytest.raises(errors.WorkspaceRefused, match="a FIFO at 'pipe'"):
        await sessions.open(OpenOptions(workspace=Workspace(str(repo))))
    assert sessions.held() == []
    assert os.listdir(state) == []
