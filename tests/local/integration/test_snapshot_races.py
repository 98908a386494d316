"""A session's tree swapped under a snapshot's capture, by a process beside it: the capture never
follows the swap out of the tree (a refusal in one line, or the link kept as a link)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from ironflow import errors
from ironflow.local.sessions import snapshots
from ironflow.local.sessions.snapshots import SnapshotStore
from ironflow.sessions.values import SnapshotInfo


async def _capture(store: SnapshotStore, tree: Path) -> SnapshotInfo:
    return await store.capture(
        {snapshots.WORKSPACE: lambda: os.open(tree, os.O_RDONLY | os.O_DIRECTORY)},
        session_id="sbx-0123456789abcdef",
        name=None,
        isolation="bwrap",
    )


_SWAP = """
import os, signal, sys
tree, secret = sys.argv[1], sys.argv[2]
n = 0
def done(*_):
    print(n, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, done)
print("swapping", flush=True)
while True:
    os.rename(tree + "/d", tree + "/d.real")
    os.symlink(secret, tree + "/d")
    os.unlink(tree + "/d")
    os.rename(tree + "/d.real", tree + "/d")
    n += 1
"""


def test_a_directory_swapped_for_a_symlink_during_captures_never_leads_outside(tmp_path: Path) -> None:
    tree, secret = tmp_path / "tree", tmp_path / "secret"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("inside")
    secret.mkdir()
    (secret / "marker").write_text("host secret")
    store = SnapshotStore(str(tmp_path / "store"), limit_bytes=1 << 30)
    # The attacker, in a process of its own (truly beside the captures): d becomes a symlink to the
    # host's directory and back, as fast as it can.
    swapper = subprocess.Popen([sys.executable, "-c", _SWAP, str(tree), str(secret)], stdout=subprocess.PIPE, text=True)
    assert swapper.stdout is not None
    assert swapper.stdout.readline() == "swapping\n"
    try:
        outcomes = asyncio.run(_captures(store, tree, seconds=1.0))
    finally:
        swapper.terminate()
        swapped = int(swapper.communicate(timeout=10)[0] or 0)
    contents, links = _kept(store.directory)
    assert b"host secret" not in contents  # never a byte of the host's file: a link at most
    assert links <= {str(secret)}
    assert not [o for o in outcomes if "\n" in o]
    assert swapped > 20, swapped  # the swaps ran beside the captures


async def _captures(store: SnapshotStore, tree: Path, *, seconds: float) -> list[str]:
    """Captures one after another for ``seconds``: each one's id, or its refusal."""
    outcomes: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            outcomes.append((await _capture(store, tree)).id)
        except errors.WorkspaceRefused as exc:
            outcomes.append(str(exc))
    return outcomes


def _kept(directory: str) -> tuple[set[bytes], set[str]]:
    """The bytes of every file in the store, and every symlink's text."""
    paths = list(Path(directory).rglob("*"))
    return {p.read_bytes() for p in paths if p.is_file() and not p.is_symlink()}, {
        os.readlink(p) for p in paths if p.is_symlink()
    }
