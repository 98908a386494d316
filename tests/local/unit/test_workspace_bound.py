"""How a workspace copy is measured while its sandbox runs (issue 34, M3): every byte a file holds
or claims counts, a symlink is never followed, and the walk stops once past the bound."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ironflow.local.workspaces import bound as workspace_bound


def test_files_in_nested_directories_count(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "g").write_bytes(b"y" * 50_000)

    total, problem = workspace_bound.measure(str(tmp_path), 10 << 20)

    assert problem is None
    assert 150_000 <= total < 150_000 + 64 * 4096  # the directories' own blocks on top


def test_a_sparse_file_counts_its_whole_length(tmp_path: Path) -> None:
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(1 << 30)  # no block written

    total, problem = workspace_bound.measure(str(tmp_path), 256 << 20)

    assert total > 256 << 20
    assert problem is not None
    assert "max_total_bytes" in problem
    assert str(256 << 20) in problem


def test_a_symlink_out_of_the_tree_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"z" * (2 << 20))
    tree = tmp_path / "tree"
    tree.mkdir()
    os.symlink(outside, tree / "dir-link")
    os.symlink(outside / "big", tree / "file-link")

    total, problem = workspace_bound.measure(str(tree), 1 << 20)

    assert problem is None
    assert total < 64 * 1024


def test_the_walk_stops_once_past_the_bound(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x" * 10_000)

    total, problem = workspace_bound.measure(str(tmp_path), 25_000)

    assert problem is not None
    assert 25_000 < total < 50 * 10_000  # not every file was read


def test_the_wait_shrinks_near_the_bound_and_follows_a_slow_walk() -> None:
    bound = 4 << 30
    far = workspace_bound._wait(0, bound, 0.001)
    near = workspace_bound._wait(bound - (1 << 20), bound, 0.001)
    slow = workspace_bound._wait(bound - (1 << 20), bound, 0.5)

    assert far == 1.0
    assert near == workspace_bound.MIN_WAIT_S
    assert slow >= 0.5 / 0.2  # a walk takes at most a fifth of the time


async def test_over_bound_returns_once_the_tree_grows_past_it(tmp_path: Path) -> None:
    watch = asyncio.ensure_future(workspace_bound.over_bound(str(tmp_path), 1 << 20))
    await asyncio.sleep(0.2)
    assert not watch.done()

    (tmp_path / "fill").write_bytes(b"x" * (2 << 20))
    reason = await asyncio.wait_for(watch, 5)

    assert "max_total_bytes" in reason
