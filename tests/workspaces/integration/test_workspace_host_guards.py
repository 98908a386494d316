"""What a workspace may do to the host (issue 34): an apply never plants a git repository whose config
would run on the host (L4), and a copy stops at ``max_total_bytes`` as it is made, leaving nothing (M3)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.workspaces import Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

MIB = 1 << 20
#: A bare repository whose ``core.pager`` would run on the host when someone runs git in it.
BARE = (
    "mkdir -p {d}/objects/info {d}/refs/heads && echo 'ref: refs/heads/main' > {d}/HEAD && "
    "printf '[core]\\n\\tbare = true\\n\\tpager = touch /tmp/pwned-by-pager\\n' > {d}/config && "
    "touch {d}/objects/info/keep {d}/refs/heads/keep && echo fine > other.txt"
)


@pytest.fixture(params=WORKSPACE_ISOLATIONS)
def isolation(request: pytest.FixtureRequest) -> Isolation:
    chosen: Isolation = request.param
    return chosen


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "README").write_text("kept\n")
    return repo


@pytest.mark.parametrize("where", ["vendor/evil", "."])
async def test_an_apply_never_plants_a_bare_repository(isolation: Isolation, tmp_path: Path, where: str) -> None:
    repo = _repo(tmp_path)
    async with LocalSandboxProvider(isolation=isolation) as provider:
        with pytest.raises(errors.WorkspaceConflict, match="git repository") as caught:
            await provider.run_command(["sh", "-c", BARE.format(d=where)], workspace=Workspace(str(repo), apply=True))
    assert caught.value.paths == (where.strip(".") or "",)
    assert sorted(p.name for p in repo.iterdir()) == ["README"]  # nothing written


async def test_a_git_file_or_directory_is_never_applied(isolation: Isolation, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    plant = (
        "mkdir -p sub/.git/hooks sub2 && echo 'gitdir: /tmp/elsewhere' > sub2/.git && echo x > sub/.git/config "
        "&& echo fine > fine.txt"
    )
    async with LocalSandboxProvider(isolation=isolation) as provider:
        result = await provider.run_command(["sh", "-c", plant], workspace=Workspace(str(repo), apply=True))
    assert result.workspace is not None
    assert result.workspace.changed_paths == ("fine.txt",)
    assert not (repo / "sub").exists()
    assert not (repo / "sub2").exists()


def test_a_copy_stops_at_max_total_bytes_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source grows past the bound after it was measured (6x the bound): the copy stops there."""
    repo = _repo(tmp_path)
    spec = Workspace(str(repo), max_total_bytes=64 * MIB, max_file_bytes=64 * MIB)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    measure = local_workspaces.snapshot

    def measured_then_filled(root: str, *args: object, **kwargs: object) -> object:
        found = measure(root, *args, **kwargs)  # type: ignore[arg-type]
        if root == str(repo):
            for i in range(6):
                with open(repo / f"fill-{i}", "wb") as f:
                    f.write(os.urandom(MIB) * 64)
        return found

    monkeypatch.setattr(local_workspaces, "snapshot", measured_then_filled)

    with pytest.raises(errors.WorkspaceRefused, match="max_total_bytes"):
        local_workspaces.prepare(spec, str(run_dir), sandbox_uid=None)

    assert os.listdir(run_dir) == []
