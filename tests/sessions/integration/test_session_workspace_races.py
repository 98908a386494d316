"""A running session cannot steer the host's read of its workspace (issue 34, H3): while a command
swaps a directory for a symlink to a root-only host directory in a tight loop, ``changes(apply=True)``
reads nothing outside the workspace, into a patch or into the host repository; nor can it make the
host read past ``max_total_bytes`` (M3). Each with the session frozen for the read, and without a
freezer (the read is of a copy made beneath the workspace's fd)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.sandbox import cgroups
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.local.workspaces import bound
from ironflow.sessions import OpenOptions
from ironflow.workspaces import Workspace

pytestmark = [pytest.mark.bwrap]

MARKER = b"root-only-marker-7c1e9a"
SWAPS = 1000
#: Swap ``w/d`` between a directory (holding ``key``) and a symlink to the secret directory,
#: counting the swaps in the sandbox's /tmp.
SWAPPER = """
import os, sys
secret = sys.argv[1]
os.makedirs("w", exist_ok=True)
n = 0
while True:
    os.symlink(secret, "w/d")
    os.stat("w")  # a moment with the symlink in place
    os.unlink("w/d")
    os.mkdir("w/d")
    with open("w/d/key", "w") as f:
        f.write("harmless\\n")
    os.unlink("w/d/key")
    os.rmdir("w/d")
    n += 1
    if n % 100 == 0:
        with open("/tmp/swaps.tmp", "w") as f:
            f.write(str(n))
        os.rename("/tmp/swaps.tmp", "/tmp/swaps")
"""


MIB = 1 << 20


@pytest.fixture(params=["frozen", "copied"])
def read_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``copied``: as on a machine with no cgroup freezer."""
    if request.param == "copied":
        monkeypatch.setattr(cgroups.SandboxCgroup, "can_freeze", False)
    mode: str = request.param
    return mode


@pytest.fixture(params=WORKSPACE_ISOLATIONS)
async def sessions(state: Path, request: pytest.FixtureRequest, read_mode: str) -> AsyncIterator[LocalSessions]:
    provider = LocalSandboxProvider(isolation=request.param)
    async with LocalSessions(provider, state_dir=str(state)) as opened:
        yield opened


def _secret(root: Path) -> Path:
    """A root-only directory holding ``key`` (the name the sandbox's directory holds) with the marker."""
    secret = root / "secret"
    secret.mkdir(mode=0o700)
    (secret / "key").write_bytes(MARKER + b"\n")
    os.chmod(secret / "key", 0o600)
    return secret


def _names(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*")}


def _holds_marker(root: Path) -> list[str]:
    found = []
    for top, _, files in os.walk(root):
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path) and MARKER in Path(path).read_bytes():
                found.append(path)
    return found


async def test_changes_apply_never_reads_through_a_swapped_symlink(sessions: LocalSessions, tmp_path: Path) -> None:
    secret = _secret(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("kept\n")
    sandbox = await sessions.open(OpenOptions(workspace=Workspace(str(repo))))
    swapper = await sandbox.commands.start(["python3", "-c", SWAPPER, str(secret)])
    patches: list[bytes] = []
    refused = 0
    swaps = 0
    try:
        async with asyncio.timeout(240):
            while swaps < SWAPS or len(patches) + refused < 20:
                try:
                    patches.append((await sessions.changes(sandbox.id, apply=True)).patch)
                except (errors.WorkspaceConflict, errors.WorkspaceUnsafe):
                    refused += 1  # the symlink outside, or what the last apply left: never read through
                counted = await sandbox.commands.run(["sh", "-c", "cat /tmp/swaps 2>/dev/null || echo 0"])
                swaps = int(counted.stdout.strip() or 0)
    finally:
        await swapper.kill()
        await sandbox.close()

    assert swaps >= SWAPS
    assert not any(MARKER in patch for patch in patches)
    assert _holds_marker(repo) == []


async def _never(root: str, bound: int) -> str:
    await asyncio.Event().wait()
    return ""


async def test_a_fill_past_max_total_bytes_is_refused_and_no_read_copy_is_left(
    sessions: LocalSessions, state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The read's own bound: what a sandbox writes between two of the in-run walks, which otherwise end
    # the session first (that bound: test_session_workspace_bound.py).
    monkeypatch.setattr(bound, "over_bound", _never)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README").write_text("kept\n")
    sandbox = await sessions.open(
        OpenOptions(workspace=Workspace(str(repo), max_total_bytes=64 * MIB, max_file_bytes=64 * MIB))
    )
    fill = "for i in 1 2 3 4 5 6; do head -c 67108864 /dev/zero > fill-$i; done"
    try:
        filled = await sandbox.commands.run(["sh", "-c", fill])
        assert filled.exit_code == 0, filled.stderr
        with pytest.raises((errors.WorkspaceUnsafe, errors.WorkspaceRefused), match="max_total_bytes"):
            await sessions.changes(sandbox.id, apply=True)
        assert not any(name.startswith("workspace-read") for name in await asyncio.to_thread(_names, state))
        assert sorted(p.name for p in repo.iterdir()) == ["README"]
    finally:
        await sandbox.close()
