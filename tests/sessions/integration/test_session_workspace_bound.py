"""A session cannot fill the host's disk through its workspace (issue 34, M3): one whose command
writes 6 GiB into a copy bounded at 256 MiB ends near the bound, the calls after say why, and its
directory is gone (real bubblewrap and gVisor)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from tests.fakes.disk_use import FILL_6_GIB, FILL_BOUND, FILL_SLACK, PeakUse, small_tree, used_bytes
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions, PoolPolicy, SessionNotFound
from ironflow.workspaces import Workspace

pytestmark = [pytest.mark.bwrap]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return small_tree(tmp_path)


@pytest.mark.parametrize("isolation", WORKSPACE_ISOLATIONS)
async def test_a_session_filling_its_workspace_ends_and_says_why(
    isolation: Literal["bwrap", "gvisor"], repo: Path, state: Path
) -> None:
    provider = LocalSandboxProvider(isolation=isolation, timeout=600)
    async with LocalSessions(provider, state_dir=str(state)) as sessions:
        await _fill_past_the_bound(sessions, repo, state)
    assert used_bytes(str(state)) == 0


async def test_a_session_handed_a_warm_sandbox_is_bounded_as_a_cold_one(repo: Path, state: Path) -> None:
    """A warm sandbox's workspace, filled at hand-out, ends its session past ``max_total_bytes`` too."""
    pool = PoolPolicy(1, workspaces=1)
    async with LocalSessions(LocalSandboxProvider(timeout=600), state_dir=str(state), pool=pool) as sessions:
        assert sessions.workspace_pool is not None
        await sessions.workspace_pool.full()
        (warm,) = sessions.workspace_pool.waiting()
        await _fill_past_the_bound(sessions, repo, state, warm=warm.proc.pid)
    assert used_bytes(str(state)) == 0


async def _fill_past_the_bound(sessions: LocalSessions, repo: Path, state: Path, *, warm: int | None = None) -> None:
    """A session that writes 6 GiB into its workspace ends near its bound, and the calls after say why."""
    sandbox = await sessions.open(OpenOptions(workspace=Workspace(str(repo), max_total_bytes=FILL_BOUND)))
    if warm is not None:
        assert sessions.host_pids(sandbox.id)[0] == warm, "handed out from the pool"
    with PeakUse(str(state)) as peak, pytest.raises(errors.SandboxError):
        await sandbox.commands.run(["sh", "-c", FILL_6_GIB], timeout=600)
    with pytest.raises(SessionNotFound) as caught:
        await sessions.changes(sandbox.id)
    await sandbox.close()
    assert "max_total_bytes" in str(caught.value)
    assert peak.most < FILL_BOUND + FILL_SLACK, peak.most  # a sample may miss the short time past the bound
