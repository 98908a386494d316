"""The host's own tar reader and writer for sandbox copies: what a hostile stream may not do.

Every refusal names the member, comes before the first write, and leaves everything beside the
destination as it was; none depends on :mod:`tarfile`'s extraction filter (CVE-2025-4517 is
exploitable by the Python this suite runs on, 3.11.7, and these tests hold there).
"""

from __future__ import annotations

import os
import re
import socket
import stat
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.fakes.crafted_tars import Tar, path_max_chain, raw_member

from ironflow import errors
from ironflow.sessions import tar_members, untar
from ironflow.sessions.tar_members import ArchiveRefused


def _tree(root: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every entry under ``root``: its mode and its content (a file's bytes, a link's target)."""
    found: dict[str, tuple[int, bytes | str | None]] = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        content = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else None
        found[str(path.relative_to(root))] = (mode, content)
    return found


def _extract(data: bytes, dest: Path, **limits: int) -> int:
    with tempfile.TemporaryFile() as spool:
        spool.write(data)
        return untar.extract(spool, str(dest), max_bytes=limits.pop("max_bytes", 1 << 30), **limits)


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """``outer/``: a file beside the destination ``outer/dest`` that an escape would change."""
    (tmp_path / "outer").mkdir()
    (tmp_path / "outer" / "flag").write_text("orig")
    return tmp_path / "outer"


def _refused(data: bytes, world: Path, text: str, **limits: int) -> str:
    before = _tree(world)
    with pytest.raises(ArchiveRefused) as caught:
        _extract(data, world / "dest", **limits)
    message = caught.value.message
    assert text in message, message
    assert "nothing was written" in message
    assert isinstance(caught.value, errors.ConfigError)
    after = _tree(world)
    assert {k: v for k, v in after.items() if not k.startswith("dest")} == {
        k: v for k, v in before.items() if not k.startswith("dest")
    }
    assert not [k for k in after if k.startswith("dest/")], "all or nothing"
    return message


def test_a_tree_comes_back_whole_with_modes_masked(tmp_path: Path) -> None:
    name = b"sub/caf\xe9-" + b"n" * 200  # not UTF-8, and longer than ustar holds: a pax header
    tar = Tar().dir(".").dir("sub", 0o2777).file("sub/x.txt", b"x" * 70000, 0o6755).file("top", b"", 0o1644)
    tar.raw(raw_member(b"./deep/er/y", b"0", 2, b"hi"))  # its parents implied
    full = tar.data()
    old = os.umask(0o022)
    try:
        assert _extract(full, tmp_path / "dest") == 5
        assert _extract(Tar().file(os.fsdecode(name), b"odd").data(), tmp_path / "dest") == 1
    finally:
        os.umask(old)
    dest = tmp_path / "dest"
    assert (dest / "sub" / "x.txt").read_bytes() == b"x" * 70000
    assert stat.S_IMODE((dest / "sub" / "x.txt").stat().st_mode) == 0o755  # no setuid/setgid, umask applied
    assert stat.S_IMODE((dest / "top").stat().st_mode) == 0o644  # no sticky bit
    assert stat.S_IMODE((dest / "sub").stat().st_mode) == 0o755
    assert (dest / "deep" / "er" / "y").read_bytes() == b"hi"
    assert os.path.exists(os.path.join(os.fsencode(dest), name))
    assert not [p for p in dest.rglob(".ironflow-untar-*")]


def test_gnu_and_ustar_streams_are_read_too(tmp_path: Path) -> None:
    for fmt in (tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT):
        data = Tar(fmt).dir(".").file("a/" + "b" * 120 if fmt == tarfile.GNU_FORMAT else "a/b", b"1").data()
        assert _extract(data, tmp_path / str(fmt)) == 2


def test_an_existing_file_is_replaced_not_written_through(world: Path) -> None:
    dest = world / "dest"
    dest.mkdir()
    (dest / "f").write_text("old")
    (dest / "keep").write_text("kept")
    _extract(Tar().file("f", b"new").data(), dest)
    assert (dest / "f").read_text() == "new"
    assert (dest / "keep").read_text() == "kept"


@pytest.mark.parametrize(
    ("hardlink", "text"),
    [
        (True, "member 'flaglink' is a hardlink to 'escape/flag': only regular files, directories and relative"),
        (False, "is beneath the symlink 'a': nothing is written through one"),  # the symlinks alone
    ],
)
def test_the_cve_2025_4517_symlink_chain_writes_nothing_outside(world: Path, hardlink: bool, text: str) -> None:
    _refused(path_max_chain(str(world / "dest"), hardlink=hardlink).data(), world, text)
    assert not (world / "newfile").exists()
    assert (world / "flag").read_text() == "orig"
    assert not (world / "dest").exists()


def _pax_link(name: bytes, target: bytes) -> bytes:
    record = b"linkpath=" + target + b"\n"
    size = len(record) + 3 if len(record) + 3 < 100 else len(record) + 4
    body = f"{size} ".encode() + record
    return raw_member(b"pax", b"x", len(body), body) + raw_member(name, b"2")


@pytest.mark.parametrize(
    ("build", "text"),
    [
        (lambda: Tar().dir("d").link("d/out", "/etc"), "member 'd/out' is a symlink to '/etc', which is absolute"),
        (lambda: Tar().link("up", "../flag").file("up", b"changed"), "to '../flag', which points out of the tree"),
        (lambda: Tar().link("a/l", "../../flag"), "member 'a/l' is a symlink to '../../flag', which points out"),
        (lambda: Tar().link("l", "a/../../flag"), "member 'l' is a symlink to 'a/../../flag', which points out"),
        (  # each link stays inside, read alone; together they lead out: 'sub/up/..' is dest's parent
            lambda: Tar().dir("sub").link("sub/up", "..").link("esc", "sub/up/../flag"),
            "member 'esc' is a symlink to 'sub/up/../flag', which steps back ('..') out of 'sub/up', no directory",
        ),
        (
            lambda: Tar().dir("sub").link("sub/up", "..").link("esc", "sub/up/..").file("esc/flag", b"changed"),
            "member 'esc/flag' is beneath the symlink 'esc': nothing is written through one",
        ),
        (
            lambda: Tar().dir("sub").link("link", "sub").file("link/x", b"changed"),
            "member 'link/x' is beneath the symlink 'link'",
        ),
        (lambda: Tar().link("link", "sub").dir("link/d"), "member 'link/d' is beneath the symlink 'link'"),
        (lambda: Tar().link("l", "gone/../x"), "steps back ('..') out of 'gone', no directory of the tree"),
        (lambda: Tar().link("l", ""), "member 'l' is a symlink to '', which is empty"),
        (lambda: Tar().link("l", "a/" * 2100), "which is too long"),
        (lambda: Tar().raw(_pax_link(b"l", b"a\x00/../../flag")), "which has a NUL byte"),
        (lambda: Tar().link(".", "x"), "member '.' is a symlink to 'x', which is in place of the destination"),
        (lambda: Tar().link("h", "../flag", hard=True).file("h", b"changed"), "member 'h' is a hardlink to '../flag'"),
        (lambda: Tar().link("h", "fine", hard=True), "member 'h' is a hardlink to 'fine'"),
        (lambda: Tar().file("/abs/x"), "member '/abs/x' is an absolute path"),
        (lambda: Tar().file("../flag", b"changed"), "member '../flag' has a '..' component"),
        (lambda: Tar().file("a/../../flag", b"changed"), "member 'a/../../flag' has a '..' component"),
        (lambda: Tar().special("null", tarfile.CHRTYPE), "member 'null' is a character device"),
        (lambda: Tar().special("disk", tarfile.BLKTYPE), "member 'disk' is a block device"),
        (lambda: Tar().special("pipe", tarfile.FIFOTYPE), "member 'pipe' is a FIFO"),
        (lambda: Tar().raw(raw_member(b"holes", b"S", 0)), "member 'holes' is a sparse file"),
        (lambda: Tar().raw(raw_member(b"odd", b"Z", 0)), "member 'odd' has the unknown type"),
        (lambda: Tar().file("x").file("./x"), "member 'x' appears twice"),
        (lambda: Tar().file("x").link("x", "fine"), "member 'x' appears twice"),
        (lambda: Tar().file("x").file("x/y"), "member 'x' is both a file and a directory"),
        (lambda: Tar().raw(raw_member(b"big", b"0", 1 << 20, b"short")), "ends inside member 'big'"),
        (lambda: Tar().raw(b"\x00" * 100 + b"junk" + b"\x00" * 408), "not a tar stream"),
        (lambda: Tar().link("\x1b[31mred", "/"), r"member '\x1b[31mred' is a symlink"),  # escaped for a terminal
    ],
)
def test_what_a_hostile_stream_holds_is_refused_by_name(world: Path, build: Callable[[], Tar], text: str) -> None:
    _refused(build().file("fine").data(), world, text)


def test_symlinks_inside_the_tree_come_back_as_links(tmp_path: Path) -> None:
    tar = Tar().link("lib.so", "lib.so.1").file("lib.so.1", b"elf")  # a link before its target
    tar.link("node_modules/.bin/x", "../pkg/bin.js").file("node_modules/pkg/bin.js", b"js")
    tar.link("current", "./node_modules//pkg/").link("via", "current/bin.js").link("sub/top", "..")
    tar.link("node_modules/.bin/later", "../../sub/../lib.so").link("dangling", "not/yet/there")
    tar.link("long", "./" * 40 + "node_modules/pkg/bin.js")  # a pax linkpath
    assert _extract(tar.data(), tmp_path / "dest") == 10
    dest = tmp_path / "dest"
    links = {str(p.relative_to(dest)): os.readlink(p) for p in dest.rglob("*") if p.is_symlink()}
    assert links == {
        "lib.so": "lib.so.1",
        "node_modules/.bin/x": "../pkg/bin.js",
        "current": "./node_modules//pkg/",
        "via": "current/bin.js",
        "sub/top": "..",
        "node_modules/.bin/later": "../../sub/../lib.so",
        "dangling": "not/yet/there",
        "long": "./" * 40 + "node_modules/pkg/bin.js",
    }
    assert (dest / "lib.so").read_bytes() == b"elf"
    assert (dest / "node_modules" / ".bin" / "x").read_bytes() == b"js"
    assert (dest / "via").read_bytes() == b"js"
    assert (dest / "node_modules" / ".bin" / "later").read_bytes() == b"elf"
    assert (dest / "sub" / "top" / "lib.so.1").read_bytes() == b"elf"
    assert (dest / "long").read_bytes() == b"js"
    assert not [p for p in dest.rglob(".ironflow-untar-*")]
    gnu = Tar(tarfile.GNU_FORMAT).file("f").link("l", "./" * 80 + "f")  # a GNU long link ('K')
    assert _extract(gnu.data(), tmp_path / "gnu") == 2
    assert os.readlink(tmp_path / "gnu" / "l") == "./" * 80 + "f"


def test_a_symlink_replaces_a_file_or_a_link_in_the_destination_never_follows_one(world: Path) -> None:
    dest = world / "dest"
    dest.mkdir()
    (dest / "was_file").write_text("old")
    (dest / "was_link").symlink_to(world / "flag")  # left by an earlier copy, or planted
    (dest / "target").write_text("t")
    _extract(Tar().link("was_file", "target").link("was_link", "target").data(), dest)
    assert os.readlink(dest / "was_file") == "target"
    assert os.readlink(dest / "was_link") == "target"
    assert (world / "flag").read_text() == "orig"
    _extract(Tar().link("was_link", "target").data(), dest)  # the same copy twice
    assert os.readlink(dest / "was_link") == "target"
    (dest / "d").mkdir()
    os.mkfifo(dest / "p")
    before = _tree(world)
    for name, what in (("d", "is a directory"), ("p", "is a special file")):
        with pytest.raises(ArchiveRefused, match=f"'{name}' in the destination {what}; nothing was written"):
            _extract(Tar().file("first").link(name, "target").data(), dest)
    assert _tree(world) == before


@pytest.mark.parametrize(
    ("target", "text"),
    [
        ("cache/../flag", r"steps back \('..'\) out of 'cache', no directory of the tree"),  # reads as 'flag'
        ("cache", "through 'cache', a symlink already in the destination"),
        ("cache/authorized_keys", "through 'cache', a symlink already in the destination"),
        ("./d/../real/./old/x", "through 'real/old', a symlink already in the destination"),
    ],
)
def test_a_link_through_a_symlink_of_the_destination_is_refused(world: Path, target: str, text: str) -> None:
    """The destination's own 'cache' and 'real/old' lead out: a new link through them would too."""
    dest = world / "dest"
    (world / "private").mkdir()
    (dest / "real").mkdir(parents=True)
    (dest / "cache").symlink_to(world / "private")
    (dest / "real" / "old").symlink_to("../../private")
    before = _tree(world)
    with pytest.raises(ArchiveRefused, match=f"member 'l' is a symlink to '{re.escape(target)}'.*{text}"):
        _extract(Tar().dir("d").file("real/f").link("l", target).data(), dest)
    assert _tree(world) == before


def test_a_link_to_a_name_the_destination_or_the_stream_holds_otherwise_is_made(world: Path) -> None:
    dest = world / "dest"
    (dest / "real").mkdir(parents=True)
    (dest / "current").symlink_to(world)  # an earlier copy's link, replaced by this one's
    (dest / "file").write_text("f")
    tree = Tar().dir("pkg").link("current", "pkg").link("via", "current/x").link("to_real", "real/new")
    _extract(tree.link("to_file", "file/x").link("dangling", "gone/x").data(), dest)
    assert os.readlink(dest / "current") == "pkg"
    assert os.readlink(dest / "via") == "current/x"
    assert os.readlink(dest / "dangling") == "gone/x"


def test_a_stream_cut_short_is_not_taken_for_the_whole_tree(world: Path) -> None:
    whole = Tar().dir(".").file("a", b"a" * 600).file("b", b"b").data()
    cut = whole[: whole.index(b"b" + bytes(511)) - 512]  # "b"'s header and data gone, no end blocks
    _refused(cut, world, "the tar stream stops before its end-of-archive block: the copy failed partway")


def test_a_nul_in_a_pax_name_is_refused(world: Path) -> None:
    record = b"path=a\x00b\n"
    body = f"{len(record) + 3} ".encode() + record
    data = Tar().raw(raw_member(b"pax", b"x", len(body), body)).raw(raw_member(b"plain", b"0")).data()
    _refused(data, world, "has a NUL byte")


def test_a_compressed_stream_is_refused_never_expanded(world: Path) -> None:
    bomb = Tar().file("zeros", bytes(20 << 20)).gzipped()
    assert len(bomb) < 1 << 20
    _refused(bomb, world, "not a tar stream", max_bytes=1 << 20)


def test_caps_on_bytes_and_members(world: Path) -> None:
    _refused(Tar().file("a", b"x" * 5000).data(), world, "over the 4096 byte limit", max_bytes=4096)
    many = Tar()
    for i in range(5):
        many.file(f"f{i}")
    _refused(many.data(), world, "more than 3 members", max_entries=3)
    implied = Tar()  # two members, but eight directories made for them
    for top in ("a", "b"):
        implied.file(f"{top}/1/2/3/f")
    _refused(implied.data(), world, "makes more than 9 files and directories", max_entries=9)
    assert _extract(implied.data(), world / "ok", max_entries=10) == 2
    deep = "/".join(["d"] * tar_members.MAX_DEPTH)
    _refused(Tar().file(f"{deep}/f").data(), world, f"is nested deeper than {tar_members.MAX_DEPTH} directories")
    huge = b"x" * (tar_members.MAX_EXTENDED_BYTES + 1)
    _refused(Tar().raw(raw_member(b"L", b"L", len(huge), huge)).data(), world, "extended header too large")


@pytest.mark.parametrize("member", ["link", "link/x"])
def test_a_symlink_already_in_the_destination_is_never_written_through(world: Path, member: str) -> None:
    dest = world / "dest"
    dest.mkdir()
    (world / "elsewhere").mkdir()
    (dest / "link").symlink_to(world / "elsewhere" if member == "link/x" else world / "flag")
    before = _tree(world)
    refused = r"'link' in the destination is a symlink \(nothing is written through one\); nothing was written"
    with pytest.raises(ArchiveRefused, match=refused):
        _extract(Tar().file("first").file(member, b"changed").data(), dest)
    assert _tree(world) == before


def test_a_file_where_a_directory_goes_is_refused_before_any_write(world: Path) -> None:
    dest = world / "dest"
    dest.mkdir()
    (dest / "d").write_text("a file")
    with pytest.raises(ArchiveRefused, match="'d' in the destination is not a directory; nothing was written"):
        _extract(Tar().file("a").file("d/x").data(), dest)
    assert sorted(os.listdir(dest)) == ["d"]


@pytest.mark.parametrize("tar", [Tar().file("d/flag", b"changed"), Tar().link("d/flag", "x")], ids=["file", "link"])
def test_writes_hold_when_a_symlink_appears_after_the_check(
    world: Path, monkeypatch: pytest.MonkeyPatch, tar: Tar
) -> None:
    """The check before writing can be raced (the destination may be a tree a session writes
    to): the writes open each directory O_NOFOLLOW themselves, links made last included."""
    dest = world / "dest"
    dest.mkdir()
    monkeypatch.setattr(untar, "_check_destination", lambda walk, members: None)
    (dest / "d").symlink_to(world)
    with pytest.raises(ArchiveRefused, match="'d' in the destination is a symlink"):
        _extract(tar.data(), dest)
    assert (world / "flag").read_text() == "orig"
    assert sorted(os.listdir(world)) == ["dest", "flag"]


def _pack(source: Path, max_bytes: int = 1 << 30) -> bytes:
    with tempfile.TemporaryFile() as spool:
        untar.pack(str(source), spool, max_bytes=max_bytes)
        spool.seek(0)
        return spool.read()


def test_pack_makes_a_stream_extract_takes_back(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "a" / "b").mkdir(parents=True)
    (source / "a" / "b" / "f").write_bytes(b"data" * 1000)
    (source / "g").write_text("g")
    (source / "a" / "to_f").symlink_to("b/f")
    (source / "a" / "b" / "up").symlink_to("../../g")
    (source / "dir_link").symlink_to("a/b")
    assert _extract(_pack(source), tmp_path / "back") == 8
    assert _tree(tmp_path / "back") == _tree(source)
    assert (tmp_path / "back" / "dir_link" / "up").read_text() == "g"


def _socket_file(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO"),
        (lambda p: p.symlink_to("/etc/hostname"), "is a symlink to '/etc/hostname', which is absolute"),
        (lambda p: p.symlink_to("../../x"), "is a symlink to '../../x', which points out of the tree"),
        (lambda p: p.symlink_to("../sub/../../x"), "which points out of the tree"),
        (lambda p: (p.parent / "up").symlink_to("..") or p.symlink_to("up/../../x"), "out of 'sub/up', no directory"),
        (lambda p: p.symlink_to("gone/../x"), "steps back ('..') out of 'sub/gone', no directory of the tree"),
        (lambda p: _socket_file(p), "is a socket"),
    ],
)
def test_pack_refuses_what_is_not_a_file_a_dir_or_a_link_inside(
    tmp_path: Path, make: Callable[[Path], object], text: str
) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "a").write_text("a")
    make(source / "sub" / "odd")
    with pytest.raises(ArchiveRefused) as caught:
        _pack(source)
    assert caught.value.message.startswith(f"'{source}/sub/"), caught.value.message
    assert text in caught.value.message
    assert caught.value.message.endswith(tar_members.COPIED)


def test_pack_stops_at_the_limit_as_it_writes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for i in range(3):
        (source / f"f{i}").write_bytes(b"x" * 3000)
    with pytest.raises(ArchiveRefused, match="over the 8000 byte limit"):
        _pack(source, max_bytes=8000)
