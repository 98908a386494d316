"""A sandbox cannot fill the host's disk through its workspace (issue 34, M3): a step that writes
6 GiB into a copy bounded at 256 MiB is stopped near the bound, the error says why, and the copy is
gone (real bubblewrap and gVisor; the session's case: tests/sessions/integration/test_session_workspace_bound.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import pytest
from tests.fakes.disk_use import FILL_6_GIB, FILL_BOUND, FILL_SLACK, PeakUse, small_tree, used_bytes
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.workspaces import Workspace

pytestmark = [pytest.mark.bwrap]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return small_tree(tmp_path)


@pytest.fixture
def temp(tmp_path: Path) -> Path:
    place = tmp_path / "work"
    place.mkdir()
    return place


@pytest.mark.parametrize("isolation", WORKSPACE_ISOLATIONS)
async def test_a_step_filling_its_workspace_is_stopped_at_the_bound(
    isolation: Literal["bwrap", "gvisor"], repo: Path, temp: Path
) -> None:
    provider = LocalSandboxProvider(isolation=isolation, temp_dir=str(temp), timeout=600)
    workspace = Workspace(str(repo), max_total_bytes=FILL_BOUND)

    with PeakUse(str(temp)) as peak, pytest.raises(errors.WorkspaceUnsafe) as caught:
        await provider.run_command(["sh", "-c", FILL_6_GIB], workspace=workspace)

    assert "max_total_bytes" in str(caught.value)
    assert str(FILL_BOUND) in str(caught.value)
    assert peak.most < FILL_BOUND + FILL_SLACK, peak.most  # a sample may miss the short time past the bound
    assert used_bytes(str(temp)) == 0  # the copy went with the step
    assert sorted(os.listdir(repo)) == ["README.md"]
