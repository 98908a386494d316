"""``ironflow sandbox snapshot|snapshots|fork|pause|unpause|extend`` and ``open --from/--idle-suspend``
as a user runs them, against a real ``sandbox serve`` of real bubblewrap sessions; the same through
the Python client of the server (:class:`RemoteSessions`, the blocking :class:`Sandbox`). Every
refusal is one ``error:`` line, exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sessions.integration.serving import TOKEN, Served, cli_env, ironflow, start_serve

from ironflow.sessions import OpenOptions
from ironflow.sessions.sync import Sandbox

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


@pytest.fixture
def snapped(tmp_path: Path) -> Iterator[Served]:
    """A server whose snapshot store is the test's own, bounded at 32 MiB."""
    env = cli_env(
        IRONFLOW_SANDBOX_TOKEN=TOKEN, IRONFLOW_SNAPSHOT_DIR=str(tmp_path / "store"), IRONFLOW_SNAPSHOT_LIMIT="32M"
    )
    server = start_serve(env)
    try:
        yield server
    finally:
        server.stop()
        for stream in (server.proc.stdout, server.proc.stderr):
            if stream is not None:
                stream.close()


def _ok(served: Served, *args: str) -> str:
    done = ironflow("sandbox", *args, env=served.env)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout.strip()


def _one_error_line(done: subprocess.CompletedProcess[str], text: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert text in lines[0], lines[0]


def test_snapshot_fork_open_from_and_rm_from_the_shell(snapped: Served) -> None:
    parent = _ok(snapped, "open", "--ttl", "10m")
    _ok(snapped, "exec", parent, "--", "sh", "-c", "echo parent > f && chmod 640 f")
    snap = _ok(snapped, "snapshot", parent, "--name", "first")
    listed = json.loads(_ok(snapped, "snapshots", "-o", "json"))
    assert [(s["id"], s["name"], s["session_id"]) for s in listed] == [(snap, "first", parent)]
    assert snap in _ok(snapped, "snapshots")

    forks = _ok(snapped, "fork", parent, "--count", "3").splitlines()
    assert len(forks) == 3
    for n, fork in enumerate(forks):
        assert _ok(snapped, "exec", fork, "--", "sh", "-c", f"stat -c %a f && cat f && echo {n} > f") == "640\nparent"
    assert _ok(snapped, "exec", parent, "--", "cat", "f") == "parent"

    _ok(snapped, "close", parent)
    restored = _ok(snapped, "open", "--from", snap)
    assert _ok(snapped, "exec", restored, "--", "cat", "f") == "parent"
    _one_error_line(ironflow("sandbox", "snapshot", "rm", snap, env=snapped.env), "is the base of open session")
    _ok(snapped, "close", restored)
    assert _ok(snapped, "snapshot", "rm", snap) == f"removed {snap}"
    assert snap not in _ok(snapped, "snapshots")


def test_pause_unpause_extend_and_idle_suspend_from_the_shell(snapped: Served) -> None:
    sandbox = _ok(snapped, "open", "--ttl", "2m")
    assert json.loads(_ok(snapped, "pause", sandbox, "-o", "json"))["paused"] is True
    assert json.loads(_ok(snapped, "ls", "-o", "json"))[0]["paused"] is True
    assert "(paused)" in _ok(snapped, "ls")
    assert _ok(snapped, "exec", sandbox, "--", "echo", "awake") == "awake"  # a request resumes it
    assert json.loads(_ok(snapped, "ls", "-o", "json"))[0]["paused"] is False
    _ok(snapped, "pause", sandbox)
    assert _ok(snapped, "unpause", sandbox) == f"{sandbox} running"

    before = json.loads(_ok(snapped, "ls", "-o", "json"))[0]["expires_at"]
    after = json.loads(_ok(snapped, "extend", sandbox, "--ttl", "2h", "-o", "json"))["expires_at"]
    assert after > before + 3600

    idle = _ok(snapped, "open", "--idle-suspend", "1s")
    _ok(snapped, "exec", idle, "--", "sh", "-c", "echo kept > k")
    deadline = time.monotonic() + 15
    while not next(s for s in json.loads(_ok(snapped, "ls", "-o", "json")) if s["id"] == idle)["paused"]:
        assert time.monotonic() < deadline, "never suspended"
        time.sleep(0.3)
    assert _ok(snapped, "exec", idle, "--", "cat", "k") == "kept"


def test_refusals_are_one_line_exit_2(snapped: Served, tmp_path: Path) -> None:
    sandbox = _ok(snapped, "open")
    cases = {
        ("snapshot", "nope"): "invalid sandbox id",
        ("snapshot", "rm", "snap-nope"): "invalid snapshot id",
        ("snapshot", "rm", "snap-0000000000000000"): "no snapshot 'snap-0000000000000000'",
        ("open", "--from", "snap-0000000000000000"): "no snapshot 'snap-0000000000000000'",
        ("open", "--from", "snap-0000000000000000", "--workspace", str(tmp_path)): "not both",
        ("open", "--idle-suspend", "soon"): "invalid duration",
        ("extend", sandbox, "--ttl", "-5m"): "invalid duration",
        ("pause", "sbx-0000000000000000"): "no open sandbox session",
        ("fork", sandbox, "--count", "0"): "",
        ("snapshot", sandbox, "--name", "bad name!"): "snapshot name",
    }
    for args, text in cases.items():
        done = ironflow("sandbox", *args, env=snapped.env)
        if text:
            _one_error_line(done, text)
        else:
            assert done.returncode == 2, done.stderr
    _ok(snapped, "exec", sandbox, "--", "sh", "-c", "mkfifo pipe")
    _one_error_line(ironflow("sandbox", "snapshot", sandbox, env=snapped.env), "'home/pipe' is a FIFO")
    _ok(snapped, "exec", sandbox, "--", "sh", "-c", "rm pipe && truncate -s 40M big")
    _one_error_line(ironflow("sandbox", "snapshot", sandbox, env=snapped.env), "past the store's limit")


def test_the_blocking_client_snapshots_forks_pauses_and_extends(snapped: Served) -> None:
    env = {"server": snapped.url, "token": TOKEN}
    with Sandbox.open(OpenOptions(ttl=120), **env) as sandbox:
        sandbox.files.write("note.txt", "from the parent")
        snap = sandbox.snapshot(name="sync")
        forks = sandbox.fork(2)
        try:
            assert [f.files.read("note.txt") for f in forks] == [b"from the parent"] * 2
        finally:
            for fork in forks:
                fork.close()
        assert sandbox.pause().paused
        assert sandbox.files.read("note.txt") == b"from the parent"  # resumed by the request
        assert sandbox.extend(3600).expires_at > time.time() + 3000
        with Sandbox.open(OpenOptions(from_snapshot=snap.id), **env) as again:
            assert again.files.read("note.txt") == b"from the parent"
