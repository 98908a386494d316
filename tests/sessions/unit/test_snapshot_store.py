"""The snapshot store every backend shares: its limit and place, its records, and a staged snapshot
that is listed only once committed and leaves nothing when its filling fails."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.sessions import snapshot_store
from ironflow.sessions.snapshot_store import SnapshotStore, parse_limit
from ironflow.sessions.values import SnapshotInfo, SnapshotNotFound


@pytest.mark.parametrize(("text", "size"), [("10G", 10 << 30), ("500M", 500 << 20), ("4KiB", 4096), ("512", 512)])
def test_a_store_limit_reads_as_bytes(text: str, size: int) -> None:
    assert parse_limit(text) == size


@pytest.mark.parametrize("text", ["", "G", "0", "-1G", "ten", "1.5G"])
def test_a_bad_store_limit_is_refused(text: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid snapshot store limit"):
        parse_limit(text)


def test_the_store_is_the_users_state_dir_unless_named() -> None:
    assert snapshot_store.default_store_dir({"HOME": "/h"}) == "/h/.local/state/ironflow/snapshots"
    assert snapshot_store.default_store_dir({"XDG_STATE_HOME": "/s"}) == "/s/ironflow/snapshots"
    assert snapshot_store.default_store_dir({"IRONFLOW_SNAPSHOT_DIR": "/x"}) == "/x"


@pytest.mark.parametrize("name", ["", "-a", "a b", "x" * 64])
def test_a_snapshot_name_is_a_label_value(name: str) -> None:
    with pytest.raises(errors.ConfigError, match="a snapshot name is 1-63"):
        snapshot_store.check_name(name)


def test_a_staged_snapshot_is_listed_once_committed_and_counts_against_the_limit(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path / "store"), limit_bytes=1000)
    with store.staged() as (snapshot_id, place):
        Path(place, "workspace.tar").write_bytes(b"x" * 300)
        assert store.list() == []
        info = SnapshotInfo(snapshot_id, "n", "sbx-0123456789abcdef", 300, time.time(), "k8s", ("workspace",))
        store.commit(place, info, {"format": "tar"})
    assert [s.id for s in store.list()] == [snapshot_id]
    assert store.get(snapshot_id)[1]["format"] == "tar"
    assert (store.used(), store.left()) == (300, 700)
    assert stat.S_IMODE(os.stat(store.directory).st_mode) == 0o700
    assert store.remove(snapshot_id)
    assert not store.remove(snapshot_id)
    with pytest.raises(SnapshotNotFound):
        store.get(snapshot_id)


def test_a_failed_staging_leaves_nothing_even_a_read_only_tree(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path / "store"))

    def fill_then_fail() -> None:
        with store.staged() as (_, place):
            Path(place, "d").mkdir()
            Path(place, "d", "f").write_text("x")
            Path(place, "d").chmod(0o500)
            raise RuntimeError("the backend failed")

    with pytest.raises(RuntimeError):
        fill_then_fail()
    assert os.listdir(store.directory) == []


def test_an_id_that_is_no_snapshot_id_never_names_a_path(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path / "store"))
    with pytest.raises(errors.ConfigError, match="invalid snapshot id"):
        store.remove("../../etc")
