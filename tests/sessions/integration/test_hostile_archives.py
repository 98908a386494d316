"""``files.download_dir`` against a session that took over its runtime (issue 34, H1): the
runtime's socket answers with a crafted tar stream, and the host writes nothing outside the
destination, whatever the Python patch level (this suite's 3.11.7 is open to CVE-2025-4517)."""

from __future__ import annotations

import os
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web
from tests.fakes.crafted_tars import Tar, path_max_chain

from ironflow import errors
from ironflow.sessions import SessionInfo
from ironflow.sessions.client import AsyncSandbox, RuntimeClient


class _Hostile:
    """A runtime that answers every tar request with ``stream``."""

    stream = b""

    async def tar(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-tar"})
        await response.prepare(request)
        for start in range(0, len(self.stream), 65536):  # chunked, as the runtime streams it
            await response.write(self.stream[start : start + 65536])
        await response.write_eof()
        return response


@pytest.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[tuple[_Hostile, AsyncSandbox]]:
    runtime = _Hostile()
    app = web.Application()
    app.router.add_get("/ironflow/v1/tar/{path}", runtime.tar)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = str(tmp_path / "rt.sock")
    await web.UnixSite(runner, sock).start()
    client = RuntimeClient(headers={"Authorization": "Bearer t"}, unix_path=sock)
    info = SessionInfo.from_json({"id": "sbx-0123456789abcdef", "backend": "local", "expires_at": 0})

    async def closer() -> None:
        pass

    sandbox = AsyncSandbox(info, client, closer)
    try:
        yield runtime, sandbox
    finally:
        await sandbox.close()
        await runner.cleanup()


def _outside(root: Path) -> dict[str, bytes | str | None]:
    found: dict[str, bytes | str | None] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if not rel.startswith("dest"):
            found[rel] = os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file() else None
    return found


CASES: list[tuple[str, Callable[[str], Tar], str]] = [
    ("cve-2025-4517", path_max_chain, "member 'flaglink' is a hardlink to 'escape/flag'"),
    ("cve-2025-4517-links-only", lambda d: path_max_chain(d, hardlink=False), "is beneath the symlink 'a'"),
    ("symlink-out", lambda d: Tar().link("out", "/etc").file("out/x"), "member 'out' is a symlink to '/etc', which"),
    ("symlink-up", lambda d: Tar().link("up", "../flag"), "to '../flag', which points out of the tree"),
    ("symlink-a-up-up", lambda d: Tar().link("l", "a/../../flag"), "to 'a/../../flag', which points out"),
    (
        "symlink-chain-out",
        lambda d: Tar().dir("sub").link("sub/up", "..").link("esc", "sub/up/../flag"),
        "steps back ('..') out of 'sub/up', no directory of the tree",
    ),
    ("through-a-link", lambda d: Tar().link("l", ".").file("l/x"), "member 'l/x' is beneath the symlink 'l'"),
    ("hardlink-out", lambda d: Tar().link("h", "../flag", hard=True).file("h"), "member 'h' is a hardlink"),
    ("absolute", lambda d: Tar().file(os.path.join(os.path.dirname(d), "abs")), "is an absolute path"),
    ("dotdot", lambda d: Tar().file("../flag", b"changed"), "member '../flag' has a '..' component"),
    ("fifo", lambda d: Tar().special("pipe", tarfile.FIFOTYPE), "member 'pipe' is a FIFO"),
    ("device", lambda d: Tar().special("mem", tarfile.CHRTYPE), "member 'mem' is a character device"),
]


@pytest.mark.parametrize(("name", "build", "text"), CASES, ids=[c[0] for c in CASES])
async def test_a_crafted_stream_is_refused_and_nothing_outside_changes(
    hostile: tuple[_Hostile, AsyncSandbox], tmp_path: Path, name: str, build: Callable[[str], Tar], text: str
) -> None:
    runtime, sandbox = hostile
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "flag").write_text("orig")
    dest = outer / "dest"
    runtime.stream = build(str(dest)).file("fine").data()
    before = _outside(tmp_path)
    with pytest.raises(errors.ConfigError) as caught:
        await sandbox.files.download_dir("out", str(dest))
    assert text in caught.value.message
    assert caught.value.message.startswith(f"refused the copy of 'out' into '{dest}': "), caught.value.message
    assert caught.value.message.endswith("; nothing was written")
    assert _outside(tmp_path) == before
    assert not (outer / "newfile").exists()
    assert not dest.exists() or not list(dest.iterdir())


async def test_symlinks_inside_the_tree_arrive_as_links(hostile: tuple[_Hostile, AsyncSandbox], tmp_path: Path) -> None:
    runtime, sandbox = hostile
    tree = Tar().dir(".").link("node_modules/.bin/x", "../pkg/bin.js").file("node_modules/pkg/bin.js", b"js")
    runtime.stream = tree.link("lib.so", "lib.so.1").file("lib.so.1", b"elf").data()
    dest = tmp_path / "dest"
    assert await sandbox.files.download_dir("out", str(dest)) == 5
    assert os.readlink(dest / "node_modules" / ".bin" / "x") == "../pkg/bin.js"
    assert (dest / "node_modules" / ".bin" / "x").read_bytes() == b"js"
    assert os.readlink(dest / "lib.so") == "lib.so.1"


async def test_a_symlink_in_the_destination_is_not_followed(
    hostile: tuple[_Hostile, AsyncSandbox], tmp_path: Path
) -> None:
    runtime, sandbox = hostile
    (tmp_path / "private").mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "cache").symlink_to(tmp_path / "private")
    runtime.stream = Tar().dir("cache").file("cache/authorized_keys", b"ssh-ed25519 AAAA attacker").data()
    with pytest.raises(errors.ConfigError, match="'cache' in the destination is a symlink"):
        await sandbox.files.download_dir("out", str(dest))
    assert list((tmp_path / "private").iterdir()) == []


async def test_bounds_hold_on_what_was_received_not_on_headers(
    hostile: tuple[_Hostile, AsyncSandbox], tmp_path: Path
) -> None:
    runtime, sandbox = hostile
    runtime.stream = Tar().file("zeros", bytes(64 << 20)).gzipped()  # 64 KiB on the wire
    with pytest.raises(errors.ConfigError, match="not a tar stream"):
        await sandbox.files.download_dir("out", str(tmp_path / "bomb"), max_bytes=1 << 20)
    assert not (tmp_path / "bomb").exists()
    many = Tar()
    for i in range(20):
        many.file(f"f{i}")
    runtime.stream = many.data()
    with pytest.raises(errors.ConfigError, match="more than 10 members"):
        await sandbox.files.download_dir("out", str(tmp_path / "many"), max_entries=10)
    runtime.stream = Tar().file("big", b"x" * 300_000).data()
    with pytest.raises(errors.ConfigError, match="over the 100000 byte limit"):
        await sandbox.files.download_dir("out", str(tmp_path / "big"), max_bytes=100_000)
    assert not (tmp_path / "many").exists()
    assert not (tmp_path / "big").exists()
