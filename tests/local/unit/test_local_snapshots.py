"""The local snapshot store on a plain host tree: what it keeps (modes, symlinks as links), what it refuses
in one line (a FIFO, a hard link, past its limit), and nothing left of a refused capture."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.local.sessions import snapshots
from ironflow.local.sessions.snapshots import SnapshotStore
from ironflow.sessions.values import SnapshotInfo, SnapshotNotFound


def _opener(path: Path) -> snapshots.Opener:
    return lambda: os.open(path, os.O_RDONLY | os.O_DIRECTORY)


async def _capture(store: SnapshotStore, tree: Path) -> SnapshotInfo:
    return await store.capture(
        {snapshots.WORKSPACE: _opener(tree)}, session_id="sbx-0123456789abcdef", name=None, isolation="bwrap"
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "d").mkdir(parents=True)
    (root / "d" / "x.sh").write_text("echo\n")
    (root / "d" / "x.sh").chmod(0o751)
    (root / "d").chmod(0o750)
    (root / "out").symlink_to("/etc/shadow")
    return root


async def test_a_capture_keeps_modes_and_symlinks_as_links(tmp_path: Path, tree: Path) -> None:
    store = SnapshotStore(str(tmp_path / "store"), limit_bytes=1 << 20)
    info = await _capture(store, tree)
    kept = Path(store.directory) / info.id / "workspace"
    assert stat.S_IMODE((kept / "d").stat().st_mode) == 0o750
    assert stat.S_IMODE((kept / "d" / "x.sh").stat().st_mode) == 0o751
    assert os.readlink(kept / "out") == "/etc/shadow"
    assert stat.S_IMODE(os.stat(store.directory).st_mode) == 0o700
    assert [s.id for s in store.list()] == [info.id]
    assert store.remove(info.id)
    assert store.list() == []
    with pytest.raises(SnapshotNotFound):
        store.get(info.id)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda root: os.mkfifo(root / "fifo"), "'workspace/fifo' is a FIFO"),
        (lambda root: os.link(root / "d" / "x.sh", root / "twin"), "is a hard link (2 names)"),
        (lambda root: os.truncate(root / "d" / "x.sh", 1 << 40), "takes the snapshot past the store's limit"),
    ],
)
async def test_a_tree_a_snapshot_takes_not_is_refused_and_leaves_nothing(
    tmp_path: Path, tree: Path, make: Callable[[Path], object], words: str
) -> None:
    store = SnapshotStore(str(tmp_path / "store"), limit_bytes=1 << 20)
    make(tree)
    with pytest.raises(errors.WorkspaceRefused) as caught:
        await _capture(store, tree)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)
    assert os.listdir(store.directory) == []
