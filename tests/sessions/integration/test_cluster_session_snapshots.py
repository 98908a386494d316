"""Snapshots and forks of cluster sessions (their workspace as an archive), on the real kube-apiserver
with kwok and the real agent-sandbox controller (``cases.py``): a snapshot outlives its session and a
new session opened from it has the same bytes, modes, mtimes and symlinks; forks start with the
parent's files, labels and run; a crafted archive is refused in one line wherever it comes from (a
session that took over its runtime, a store file changed on disk, a request straight to a runtime),
and nothing is kept, written outside or left running.

kwok runs every exec of a case on this host in one work dir, so all its pods share those files:
that a fork's writes stay its own is shown on real pods
(``tests/k8s/real_node/test_real_node_session_snapshots.py``).
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiohttp import web
from tests.fakes.crafted_tars import Tar
from tests.sessions.integration.cases import SessionCase, open_case, wipe

from ironflow import errors
from ironflow.k8s.sessions import archives
from ironflow.sessions import OpenOptions
from ironflow.sessions.client import RuntimeClient
from ironflow.sessions.snapshot_store import SnapshotStore
from ironflow.sessions.values import SnapshotInfo
from ironflow.testing.polling import eventually

_MODES = (
    "mkdir -p d e g/deep && printf 'echo hi\\n' > d/x.sh && chmod 751 d/x.sh && chmod 750 d && chmod 700 e"
    " && printf shared > g/deep/s && chmod 664 g/deep/s && chmod 2775 g && printf ro > ro && chmod 444 ro"
    " && ln -s d/x.sh link && ln -s ../ro g/up"
)


@pytest.fixture(params=["k8s-real-apiserver", "agent-sandbox-real-controller"])
async def case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SessionCase]:
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_DIR", str(tmp_path / "store"))  # the sessions' default store, made lazily
    async with open_case(request, request.param, tmp_path) as opened:
        yield opened


def _tree(root: Path) -> dict[str, tuple[int, str | bytes | None, int | None]]:
    """Every entry under ``root``: its mode, its bytes (a symlink: its text), a file's mtime."""
    found: dict[str, tuple[int, str | bytes | None, int | None]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            found[rel] = (0, os.readlink(path), None)
        elif stat.S_ISREG(st.st_mode):
            found[rel] = (stat.S_IMODE(st.st_mode), path.read_bytes(), int(st.st_mtime))
        else:
            found[rel] = (stat.S_IMODE(st.st_mode), None, None)
    return found


def _kinds(root: Path) -> list[int]:
    return [path.lstat().st_mode for path in root.rglob("*")]


async def test_a_snapshot_outlives_its_session_and_restores_bytes_and_modes(case: SessionCase) -> None:
    work = Path(case.work_dir)
    sandbox = await case.open(OpenOptions(ttl=120, labels={"team": "a"}))
    await sandbox.files.write("bin", bytes(range(256)) * 64)
    made = await sandbox.commands.run(["sh", "-c", _MODES + " && chmod 600 bin"])
    assert made.exit_code == 0, made
    before = _tree(work)
    assert (before["g"][0], before["g/deep/s"][0], before["link"][1]) == (0o2775, 0o664, "d/x.sh")

    info = await case.sessions.snapshot(sandbox.id, name="before")
    backend = "agent-sandbox" if case.backend.startswith("agent-sandbox") else "k8s"
    assert (info.name, info.session_id, info.isolation, info.trees) == ("before", sandbox.id, backend, ("workspace",))
    await sandbox.close()
    await eventually(case.nothing_left, interval_s=0.1, what="the sessions' objects gone")
    wipe(work)  # the pod's files went with it

    assert [s.id for s in await case.sessions.snapshots()] == [info.id]
    restored = await case.open(OpenOptions(ttl=120, from_snapshot=info.id))
    after = _tree(work)
    assert after == {k: (m & 0o1777, b, t) for k, (m, b, t) in before.items()}  # setgid dropped, nothing else
    seen = await restored.commands.run(["sh", "-c", "cat link; stat -c %a d e g/deep/s ro"])
    assert seen.stdout.split() == ["echo", "hi", "750", "700", "664", "444"]
    await restored.close()
    assert await case.sessions.remove_snapshot(info.id)
    assert await case.sessions.snapshots() == []
    await eventually(case.nothing_left, interval_s=0.1, what="the sessions' objects gone")


async def test_forks_start_with_the_parents_files_labels_and_run(case: SessionCase) -> None:
    parent = await case.open(OpenOptions(ttl=120, labels={"team": "a"}, run_id="run-7"))
    await parent.files.write("notes/a.txt", "from the parent\n")
    forks = await case.sessions.fork(parent.id, count=3)
    try:
        assert len({f.id for f in forks} | {parent.id}) == 4
        for fork in forks:
            assert (fork.info.labels, fork.info.run_id) == ({"team": "a"}, "run-7")
            assert fork.info.expires_at <= parent.info.expires_at + 1
            assert await fork.files.read("notes/a.txt") == b"from the parent\n"
        (base,) = await case.sessions.snapshots()
        assert (base.name, base.session_id) == (f"fork-of-{parent.id}", parent.id)
    finally:
        for fork in forks:
            await fork.close()
        await parent.close()
    await eventually(case.nothing_left, interval_s=0.1, what="the sessions' objects gone")


#: Each built with the directory beside the workspace (``flag`` in it says "orig" until something escapes).
CRAFTED: list[tuple[str, Callable[[Path], Tar], str]] = [
    ("dotdot", lambda outer: Tar().file("../flag", b"changed"), "member '../flag' has a '..' component"),
    ("absolute", lambda outer: Tar().file(str(outer / "abs")), "is an absolute path"),
    ("symlink-out", lambda outer: Tar().link("out", str(outer)).file("out/x"), "is a symlink to '/"),
    ("symlink-up", lambda outer: Tar().link("up", "../flag"), "which points out of the tree"),
    ("hardlink", lambda outer: Tar().file("a").link("h", "a", hard=True), "member 'h' is a hardlink"),
    ("device", lambda outer: Tar().special("mem", tarfile.CHRTYPE), "member 'mem' is a character device"),
    ("fifo", lambda outer: Tar().special("pipe", tarfile.FIFOTYPE), "member 'pipe' is a FIFO"),
]
_IDS = [c[0] for c in CRAFTED]


def _planted(store: SnapshotStore, archive: bytes) -> SnapshotInfo:
    """A cluster snapshot whose archive was changed on disk after it was kept."""
    with store.staged() as (snapshot_id, place):
        Path(place, archives.ARCHIVE).write_bytes(archive)
        info = SnapshotInfo(snapshot_id, None, "sbx-0123456789abcdef", len(archive), 1.0, "k8s", ("workspace",))
        return store.commit(place, info)


@pytest.mark.parametrize(("name", "build", "text"), CRAFTED, ids=_IDS)
async def test_a_crafted_archive_in_the_store_opens_no_session(
    case: SessionCase, tmp_path: Path, name: str, build: Callable[[Path], Tar], text: str
) -> None:
    store = SnapshotStore()
    info = _planted(store, build(tmp_path).file("fine").data())
    (tmp_path / "flag").write_text("orig")
    with pytest.raises(errors.WorkspaceRefused) as caught:
        await case.sessions.open(OpenOptions(ttl=60, from_snapshot=info.id))
    assert text in caught.value.message, caught.value.message
    assert "\n" not in caught.value.message
    assert caught.value.message.startswith("snapshot refused: the session's workspace archive: ")
    assert (tmp_path / "flag").read_text() == "orig"
    assert _tree(Path(case.work_dir)) == {}
    await eventually(case.nothing_left, interval_s=0.1, what="the sessions' objects gone")


async def test_a_local_sessions_snapshot_is_refused_before_any_pod(case: SessionCase) -> None:
    store = SnapshotStore()
    with store.staged() as (snapshot_id, place):
        os.mkdir(os.path.join(place, "workspace"))
        store.commit(place, SnapshotInfo(snapshot_id, None, "sbx-0123456789abcdef", 0, 1.0, "bwrap", ("workspace",)))
    with pytest.raises(errors.ConfigError, match="is of a bwrap session: open it on that backend"):
        await case.sessions.open(OpenOptions(ttl=60, from_snapshot=snapshot_id))
    await eventually(case.nothing_left, interval_s=0.1, what="the sessions' objects gone")


@pytest.mark.parametrize(("name", "build", "text"), CRAFTED, ids=_IDS)
async def test_a_sessions_runtime_refuses_a_crafted_restore_itself(
    case: SessionCase, tmp_path: Path, name: str, build: Callable[[Path], Tar], text: str
) -> None:
    """The host checks first; the new session's runtime checks again as it writes (``?exact=1``)."""
    (tmp_path / "flag").write_text("orig")
    sandbox = await case.open(OpenOptions(ttl=60))
    where, token = case.sessions.route(sandbox.id)
    client = RuntimeClient(unix_path=where, headers={"Authorization": f"Bearer {token.reveal()}"})
    try:
        with pytest.raises((errors.ConfigError, PermissionError)):
            await client.json("PUT", "/ironflow/v1/tar/.?exact=1", data=build(tmp_path).data())
    finally:
        await client.aclose()
        await sandbox.close()
    assert (tmp_path / "flag").read_text() == "orig"
    assert not (tmp_path / "abs").exists()
    assert all(stat.S_ISREG(m) or stat.S_ISDIR(m) for m in _kinds(Path(case.work_dir)))


class _TakenOver:
    """A session runtime a sandbox took over: every tar request answers ``stream``."""

    def __init__(self, stream: bytes) -> None:
        self.stream = stream

    async def tar(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/x-tar"})
        await response.prepare(request)
        await response.write(self.stream)
        await response.write_eof()
        return response


@pytest.mark.parametrize(("name", "build", "text"), CRAFTED, ids=_IDS)
async def test_a_crafted_stream_from_a_session_is_never_kept(
    tmp_path: Path, name: str, build: Callable[[Path], Tar], text: str
) -> None:
    app = web.Application()
    app.router.add_get("/ironflow/v1/tar/{path:.*}", _TakenOver(build(tmp_path).data()).tar)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, str(tmp_path / "rt.sock")).start()
    client = RuntimeClient(headers={"Authorization": "Bearer t"}, unix_path=str(tmp_path / "rt.sock"))
    store = SnapshotStore(str(tmp_path / "store"))
    try:
        with pytest.raises(errors.WorkspaceRefused) as caught:
            await archives.capture(store, client, session_id="sbx-0123456789abcdef", name=None, backend="k8s")
    finally:
        await client.aclose()
        await runner.cleanup()
    assert text in caught.value.message, caught.value.message
    assert "\n" not in caught.value.message
    assert os.listdir(store.directory) == []


async def test_a_workspace_past_the_stores_limit_is_refused_and_nothing_kept(tmp_path: Path) -> None:
    app = web.Application()
    app.router.add_get("/ironflow/v1/tar/{path:.*}", _TakenOver(Tar().file("big", b"x" * 200_000).data()).tar)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.UnixSite(runner, str(tmp_path / "rt.sock")).start()
    client = RuntimeClient(headers={"Authorization": "Bearer t"}, unix_path=str(tmp_path / "rt.sock"))
    store = SnapshotStore(str(tmp_path / "store"), limit_bytes=100_000)
    try:
        with pytest.raises(errors.WorkspaceRefused, match=r"past the store's limit \(100000 bytes left\)"):
            await archives.capture(store, client, session_id="sbx-0123456789abcdef", name=None, backend="k8s")
    finally:
        await client.aclose()
        await runner.cleanup()
    assert os.listdir(store.directory) == []
