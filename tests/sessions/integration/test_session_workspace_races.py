"""A running session cannot steer the host's read of its workspace (issue 34, H3): while a command
swaps a directory for a symlink to a root-only host directory in a tight loop, ``changes(apply=True)``
reads nothing outside the workspace, into a patch or into the host repository."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.local.provider import LocalSandboxProvider
from ironflow.local.sessions import LocalSessions
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


@pytest.fixture(params=WORKSPACE_ISOLATIONS)
async def sessions(state: Path, request: pytest.FixtureRequest) -> AsyncIterator[LocalSessions]:
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
    sandbox = await sessions.open(workspace=Workspace(str(repo)))
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
