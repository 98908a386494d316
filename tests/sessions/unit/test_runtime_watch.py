"""The runtime's directory watch (``watch.py``, loaded by path as the sandbox loads it): inotify records
read, directories opened beneath the root only, an event from a directory replaced by a symlink
dropped; the client's event value and the CLI's line."""

from __future__ import annotations

import os
import struct
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sessions.unit.runtime_files import runtime_module

from ironflow.cli.formats import ResultFormat
from ironflow.cli.sandbox_watch import render_event
from ironflow.sessions import WatchEvent


@pytest.fixture(scope="module")
def watch() -> Iterator[types.ModuleType]:
    with runtime_module("watch") as loaded:
        yield loaded


def _record(wd: int, mask: int, name: str) -> bytes:
    """One inotify record as the kernel lays it out (the name padded to 16 bytes)."""
    padded = name.encode().ljust(16, b"\0")
    return struct.pack("iIII", wd, mask, 0, len(padded)) + padded


def test_inotify_records_are_read_with_their_padded_names(watch: types.ModuleType) -> None:
    raw = struct.pack("iIII", 1, 0x100, 0, 16) + b"new-file\0".ljust(16, b"\0")
    raw += struct.pack("iIII", 2, 0x200, 7, 0)
    assert list(watch.records(raw)) == [(1, 0x100, 0, "new-file"), (2, 0x200, 7, "")]


def test_a_directory_is_opened_beneath_the_root_never_through_a_symlink(
    watch: types.ModuleType, tmp_path: Path
) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "a" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "a" / "file").write_text("x")
    os.close(watch.open_beneath(str(tmp_path), "a/b"))
    for rel in ("a/link", "a/file", "a/../outside", "a//b", "missing"):
        with pytest.raises((NotADirectoryError, FileNotFoundError)):
            watch.open_beneath(str(tmp_path), rel)


def test_an_event_from_a_directory_swapped_for_a_symlink_is_dropped_and_unwatched(
    watch: types.ModuleType, tmp_path: Path
) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    w = watch.Watch(str(root), recursive=True, max_events=8)
    try:
        wd = next(wd for wd, (rel, _) in w.dirs.items() if rel == "d")
        w.read(_record(wd, 0x100, "seen"))  # IN_CREATE while d is itself
        assert [e["name"] for e in w.take(0)[0]] == ["d/seen"]
        w.read(_record(wd, 0x100, "queued"))  # read, then d is swapped before the client takes it
        (root / "d").rename(tmp_path / "moved")  # a race the runtime lost: the move not read yet
        (root / "d").symlink_to(outside)
        w.read(_record(wd, 0x100, "secret"))  # read after the swap: d is not the directory watched
        events, ended = w.take(0)
        assert events == []  # "queued": its parent no longer resolves beneath the root on delivery
        assert not ended
        assert wd not in w.dirs
    finally:
        w.close()


def test_a_read_of_many_events_in_one_directory_checks_its_path_once(
    watch: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under gVisor each check is file I/O through the gofer: one per event drained a 60,000-event
    backlog in 4.9 s (CI's slow-client watch test timed out); a directory that comes starts anew."""
    (tmp_path / "d").mkdir()
    w = watch.Watch(str(tmp_path), recursive=True, max_events=10_000)
    try:
        wd = next(wd for wd, (rel, _) in w.dirs.items() if rel == "d")
        root = next(wd for wd, (rel, _) in w.dirs.items() if rel == "")
        checks: list[int] = []
        current = w.current

        def counted(wd: int) -> str | None:
            checks.append(wd)
            found: str | None = current(wd)
            return found

        monkeypatch.setattr(w, "current", counted)
        w.read(b"".join(_record(wd, 0x100, f"f{n}") for n in range(500)))
        assert checks == [wd]
        (tmp_path / "e").mkdir()
        w.read(_record(wd, 0x100, "g") + _record(root, 0x100 | 0x40000000, "e") + _record(wd, 0x100, "h"))
        assert checks == [wd, wd, root, wd]
        assert len(w.take(0)[0]) == 503
    finally:
        w.close()


def test_a_new_directory_and_its_tree_are_watched_before_its_create_is_said(
    watch: types.ModuleType, tmp_path: Path
) -> None:
    """A client that writes in a directory once it hears of it must have its writes seen: the
    create went out before the watch was added, and under gVisor a write came in between (CI)."""
    w = watch.Watch(str(tmp_path), recursive=True, max_events=8)
    try:
        (tmp_path / "a" / "deeper").mkdir(parents=True)
        watched_when_said: list[tuple[str, list[str]]] = []
        push = w.push

        def said(event: dict[str, object], parents: tuple[str, ...]) -> None:
            watched_when_said.append((str(event["name"]), sorted(rel for rel, _ in w.dirs.values())))
            push(event, parents)

        w.push = said
        root = next(wd for wd, (rel, _) in w.dirs.items() if rel == "")
        w.read(_record(root, 0x100 | 0x40000000, "a"))  # IN_CREATE | IN_ISDIR
        assert watched_when_said == [("a", ["", "a", "a/deeper"])]
    finally:
        w.close()


def test_a_slow_client_gets_one_overflow_event_counting_what_was_dropped(
    watch: types.ModuleType, tmp_path: Path
) -> None:
    w = watch.Watch(str(tmp_path), recursive=False, max_events=2)
    try:
        for n in range(5):
            w.push({"type": "create", "name": f"f{n}", "is_dir": False}, ("",))
        w.push({"type": "write", "name": "f1", "is_dir": False}, ("",))
        events, _ = w.take(0)
        assert [e["type"] for e in events] == ["create", "create", "overflow"]
        assert events[-1]["dropped"] == 4
    finally:
        w.close()


def test_a_watch_event_is_read_from_its_line_and_a_bad_one_is_refused() -> None:
    assert WatchEvent.from_json({"watching": ".", "recursive": True}) is None
    assert WatchEvent.from_json({}) is None
    event = WatchEvent.from_json({"type": "rename", "name": "b", "old_name": "a", "is_dir": True})
    assert event == WatchEvent("rename", "b", is_dir=True, old_name="a")
    for bad in ({"type": "chmod", "name": "x"}, {"type": "create", "name": 3}, {"type": "overflow", "dropped": "9"}):
        with pytest.raises(ValueError, match="not a watch event"):
            WatchEvent.from_json(bad)


def test_an_event_line_shows_a_name_s_control_characters_as_escapes() -> None:
    assert render_event(WatchEvent("create", "a\nb\x1b[2J"), ResultFormat.TEXT) == "create a\\nb\\x1b[2J"
    assert render_event(WatchEvent("overflow", "", dropped=3), ResultFormat.TEXT) == "overflow: 3 events dropped"
    assert render_event(WatchEvent("remove", "d", is_dir=True), ResultFormat.TEXT) == "remove d/"
