"""Opening a sandbox-writable tree beneath its fd (issue 34, H3): no symlink is followed anywhere on the
way, with ``openat2`` and with the per-component fallback alike; the copy counts its bytes as it goes;
the object store's blobs are git's."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ironflow.local.workspaces import blob_store, tree_reads


@pytest.fixture(params=[True, False], ids=["openat2", "fallback"])
def walk(request: pytest.FixtureRequest) -> Iterator[None]:
    was = tree_reads.use_openat2(request.param)
    try:
        yield
    finally:
        tree_reads.use_openat2(was)


@pytest.fixture(params=[1, 2], ids=["one-thread", "two-threads"])
def threads(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_bytes(b"inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(b"outside\n")
    (tree / "link").symlink_to(outside)
    (tree / "a" / "link").symlink_to("b")
    (tree / "a" / "b" / "flink").symlink_to("f")
    fd = os.open(tree, tree_reads.DIR_FLAGS)
    try:
        yield tree, fd
    finally:
        os.close(fd)


@pytest.mark.usefixtures("walk")
def test_a_plain_path_opens(root: tuple[Path, int]) -> None:
    fd = tree_reads.open_beneath(root[1], "a/b/f", os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"inside\n"
    finally:
        os.close(fd)


@pytest.mark.usefixtures("walk")
@pytest.mark.parametrize("path", ["link/f", "link", "a/link/f", "a/b/flink"])
def test_a_symlink_anywhere_on_the_way_fails_the_open(root: tuple[Path, int], path: str) -> None:
    with pytest.raises(OSError, match=r"symbolic links|Not a directory") as caught:
        tree_reads.open_beneath(root[1], path, os.O_RDONLY)
    assert caught.value.errno in (errno.ELOOP, errno.ENOTDIR)


@pytest.mark.usefixtures("walk")
@pytest.mark.parametrize("path", ["../outside/f", "a/../../outside/f", "/etc/passwd", "a//b/f", "./a/b/f", ""])
def test_a_path_that_is_not_plain_is_refused_before_any_open(root: tuple[Path, int], path: str) -> None:
    with pytest.raises(OSError, match="not a plain relative path") as caught:
        tree_reads.open_beneath(root[1], path, os.O_RDONLY)
    assert caught.value.errno == errno.EINVAL


@pytest.mark.usefixtures("walk")
def test_lstat_beneath_sees_a_symlink_and_never_walks_through_one(root: tuple[Path, int]) -> None:
    found = tree_reads.lstat_beneath(root[1], "a/link")
    assert found is not None
    assert found[1] == "b"
    assert tree_reads.lstat_beneath(root[1], "a/missing") is None
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        tree_reads.lstat_beneath(root[1], "link/f")


@pytest.mark.usefixtures("walk")
def test_copy_tree_copies_files_dirs_and_links_as_links(root: tuple[Path, int], tmp_path: Path, threads: int) -> None:
    tree, fd = root
    os.chmod(tree / "a" / "b" / "f", 0o700)
    os.utime(tree / "a" / "b" / "f", ns=(1, 1_500_000_000_000_000_123))
    copy = tmp_path / "copy"
    copy.mkdir()
    dst = os.open(copy, tree_reads.DIR_FLAGS)
    try:
        tree_reads.copy_tree(fd, dst, max_file=100, max_total=100, owner=None, threads=threads)
    finally:
        os.close(dst)
    assert (copy / "a" / "b" / "f").read_bytes() == b"inside\n"
    assert os.readlink(copy / "link") == os.readlink(tree / "link")
    st = (copy / "a" / "b" / "f").stat()
    assert (st.st_mode & 0o777, st.st_mtime_ns) == (0o700, 1_500_000_000_000_000_123)
    assert (copy / "link").is_symlink()


@pytest.mark.usefixtures("walk")
@pytest.mark.parametrize(("max_file", "max_total", "path"), [(6, 100, "a/b/f"), (100, 10, None)])
def test_copy_tree_stops_at_a_bound(
    root: tuple[Path, int], tmp_path: Path, max_file: int, max_total: int, path: str | None, threads: int
) -> None:
    tree, fd = root
    (tree / "a" / "g").write_bytes(b"x" * 6)
    copy = tmp_path / "copy"
    copy.mkdir()
    dst = os.open(copy, tree_reads.DIR_FLAGS)
    try:
        with pytest.raises(tree_reads.Refused) as caught:
            tree_reads.copy_tree(fd, dst, max_file=max_file, max_total=max_total, owner=None, threads=threads)
    finally:
        os.close(dst)
    assert caught.value.path == path
    copied = sum(p.stat().st_size for p in copy.rglob("*") if p.is_file() and not p.is_symlink())
    assert copied <= max_total + 1


def test_copy_tree_refuses_a_fifo(tmp_path: Path, threads: int) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    os.mkfifo(tree / "pipe")
    copy = tmp_path / "copy"
    copy.mkdir()
    src, dst = os.open(tree, tree_reads.DIR_FLAGS), os.open(copy, tree_reads.DIR_FLAGS)
    try:
        with pytest.raises(tree_reads.Refused, match="special file"):
            tree_reads.copy_tree(src, dst, max_file=10, max_total=10, owner=None, threads=threads)
    finally:
        os.close(src)
        os.close(dst)


def test_two_threads_copy_a_tree_of_many_directories_whole(tmp_path: Path) -> None:
    """Each thread copies its share of the bytes; every file, mode and mtime is the source's."""
    tree = tmp_path / "tree"
    for n in range(60):
        directory = tree / f"d{n % 7}" / f"e{n % 3}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}").write_bytes(os.urandom(n * 97))
        os.chmod(directory / f"f{n}", 0o600 | (n % 2) * 0o100)
    os.chmod(tree / "d3", 0o500)  # a read-only directory: filled before its mode is set
    copy = tmp_path / "copy"
    copy.mkdir()
    src, dst = os.open(tree, tree_reads.DIR_FLAGS), os.open(copy, tree_reads.DIR_FLAGS)
    try:
        tree_reads.copy_tree(src, dst, max_file=1 << 20, max_total=1 << 30, owner=None, threads=2)
    finally:
        os.close(src)
        os.close(dst)

    def shape(root: Path) -> list[tuple[str, int, int, bytes]]:
        out = []
        for path in sorted(root.rglob("*")):
            st = path.lstat()
            data = path.read_bytes() if path.is_file() else b""
            out.append((str(path.relative_to(root)), st.st_mode, st.st_mtime_ns, data))
        return out

    assert shape(copy) == shape(tree)
    os.chmod(tree / "d3", 0o700)
    os.chmod(copy / "d3", 0o700)


def test_blobs_are_gits_own(tmp_path: Path) -> None:
    git_dir = tmp_path / "store.git"
    subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
    data = b"line\n" * 70_000 + bytes(range(256))
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        oid = blob_store.write_blob(str(git_dir), fd, len(data))
    finally:
        os.close(fd)
    assert (
        oid == subprocess.run(["git", "hash-object", str(tmp_path / "f")], capture_output=True).stdout.decode().strip()
    )
    shown = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", oid], capture_output=True)
    assert shown.stdout == data
    out = os.open(tmp_path / "back", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        blob_store.copy_blob(str(git_dir), oid, out)
    finally:
        os.close(out)
    assert (tmp_path / "back").read_bytes() == data


@pytest.mark.parametrize("size", [3, 100])
def test_a_file_not_of_its_size_is_refused(tmp_path: Path, size: int) -> None:
    git_dir = tmp_path / "store.git"
    (git_dir / "objects").mkdir(parents=True)
    (tmp_path / "f").write_bytes(b"0123456789")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        with pytest.raises(blob_store.Changed):
            blob_store.write_blob(str(git_dir), fd, size)
    finally:
        os.close(fd)
    assert os.listdir(git_dir / "objects") == []  # no half-written object left
