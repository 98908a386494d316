"""Run temp dirs: which ones a sweep removes (owner surely gone) and which it keeps (anything unclear)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.local import workdirs
from ironflow.local.sandbox_provider import LocalSandboxProvider

OWNER = workdirs.current_owner()
pytestmark = pytest.mark.skipif(OWNER is None, reason="no /proc to name a process by")


def _marked(parent: Path, name: str, owner: workdirs.Owner) -> Path:
    directory = parent / f"{workdirs.PREFIX}{name}"
    directory.mkdir()
    (directory / ".ironflow-owner").write_text(workdirs.format_marker(owner))
    (directory / "proxy.sock").write_text("")
    return directory


def _dead_pid() -> int:
    return int(subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout)


def test_a_marker_reads_back_and_anything_else_is_not_one() -> None:
    assert OWNER is not None
    assert workdirs.parse_marker(workdirs.format_marker(OWNER)) == OWNER
    for text in ("", "garbage", workdirs.format_marker(OWNER).replace(str(OWNER.pid), "x")):
        assert workdirs.parse_marker(text) is None


def test_the_sweep_removes_what_a_gone_owner_left_and_keeps_the_rest(tmp_path: Path) -> None:
    assert OWNER is not None
    dead = _marked(tmp_path, "dead", dataclasses.replace(OWNER, pid=_dead_pid()))
    reused = _marked(tmp_path, "reused", dataclasses.replace(OWNER, start_time=OWNER.start_time + 1))
    rebooted = _marked(tmp_path, "rebooted", dataclasses.replace(OWNER, boot_id="another-boot"))
    live = _marked(tmp_path, "live", OWNER)
    elsewhere = _marked(tmp_path, "other-ns", dataclasses.replace(OWNER, pid=_dead_pid(), pid_namespace="pid:[1]"))
    unmarked = tmp_path / f"{workdirs.PREFIX}unmarked"
    unmarked.mkdir()
    # Marked as dead, but under names without the prefix: another program's, and a symlink's target.
    not_ours = _marked(tmp_path, "x", dataclasses.replace(OWNER, pid=_dead_pid())).rename(tmp_path / "other-dead")
    target = _marked(tmp_path, "y", dataclasses.replace(OWNER, pid=_dead_pid())).rename(tmp_path / "link-target")
    link = tmp_path / f"{workdirs.PREFIX}link"
    link.symlink_to(target)

    assert workdirs.sweep(str(tmp_path)) == 3
    for gone in (dead, reused, rebooted):
        assert not gone.exists(), gone
    for kept in (live, elsewhere, unmarked, not_ours, target, link):
        assert kept.exists(), kept
    assert (target / "proxy.sock").exists()


def test_a_run_dir_is_marked_as_this_processes_and_removed_after(tmp_path: Path) -> None:
    with workdirs.run_dir(str(tmp_path)) as path:
        assert os.path.basename(path).startswith(workdirs.PREFIX)
        assert workdirs.parse_marker(Path(path, ".ironflow-owner").read_text()) == OWNER
        assert workdirs.sweep(str(tmp_path)) == 0
        assert os.path.isdir(path)
    assert not os.path.exists(path)


def test_a_temp_dir_that_does_not_exist_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match=r"temp_dir '.*missing' is not a directory"):
        LocalSandboxProvider(temp_dir=str(tmp_path / "missing"))


def test_live_dirs_lists_only_the_dirs_whose_owner_surely_runs_now(tmp_path: Path) -> None:
    assert OWNER is not None
    _marked(tmp_path, "dead", dataclasses.replace(OWNER, pid=_dead_pid()))
    _marked(tmp_path, "rebooted", dataclasses.replace(OWNER, boot_id="another-boot"))
    _marked(tmp_path, "other-ns", dataclasses.replace(OWNER, pid_namespace="pid:[1]"))
    (tmp_path / f"{workdirs.PREFIX}unmarked").mkdir()
    older = _marked(tmp_path, "older", OWNER)
    os.utime(older / ".ironflow-owner", (1000.0, 1000.0))
    with workdirs.run_dir(str(tmp_path)) as newer:
        found = workdirs.live_dirs(str(tmp_path))
    assert [(d.path, d.owner) for d in found] == [(str(older), OWNER), (newer, OWNER)]
    assert found[0].created_at == 1000.0
    assert workdirs.live_dirs(str(tmp_path / "missing")) == []
