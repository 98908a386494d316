"""Local sessions kept across a restart of ``ironflow sandbox serve --keep-sessions`` (real bubblewrap,
real servers): SIGTERM to the server only, and the next one serves the session again under its id with
its files; a sandbox killed meanwhile is reported gone and its directory and cgroup are cleaned."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from tests.sessions.integration.serving import TOKEN, Served, cli_env, ironflow, start_serve

from ironflow.testing.processes import running

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


@pytest.fixture
def env(state: Path) -> Iterator[dict[str, str]]:
    """The servers' environment: their sessions' directories in ``state`` (TMPDIR); whatever a test
    leaves kept is closed by one more server at the end."""
    env = cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN, TMPDIR=str(state))
    yield env
    last = start_serve(env, "--keep-sessions")
    try:
        ironflow("sandbox", "close", "--all", env=last.env)
    finally:
        _stop(last)
    for record in _records(state).values():  # a sandbox no server could take: killed here
        if running(record.pid):
            os.killpg(record.pid, signal.SIGKILL)


class _Record(NamedTuple):
    pid: int
    cgroup: dict[str, str]
    dir: Path


def _records(state: Path) -> dict[str, _Record]:
    found = {}
    for path in state.glob("ifs-*/kept.json"):
        doc = json.loads(path.read_text())
        found[doc["info"]["id"]] = _Record(doc["pid"], doc["cgroup"], path.parent)
    return found


def _stop(served: Served) -> None:
    assert served.stop() == 0
    for stream in (served.proc.stdout, served.proc.stderr):
        if stream is not None:
            stream.close()


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_kept_session_answers_under_its_id_with_its_files_after_a_restart(state: Path, env: dict[str, str]) -> None:
    first = start_serve(env, "--keep-sessions")
    try:
        sid = ironflow("sandbox", "open", "--ttl", "5m", env=first.env).stdout.strip()
        assert ironflow("sandbox", "exec", sid, "--", "sh", "-c", "echo kept > f", env=first.env).returncode == 0
    finally:
        _stop(first)  # SIGTERM: the server lets go of the session
    record = _records(state)[sid]
    assert running(record.pid)
    assert oct(os.stat(record.dir / "kept.json").st_mode & 0o777) == "0o600"
    second = start_serve(env, "--keep-sessions")
    try:
        done = ironflow("sandbox", "exec", sid, "--", "cat", "f", env=second.env)
        assert (done.returncode, done.stdout) == (0, "kept\n"), done.stderr
        listed = json.loads(ironflow("sandbox", "ls", "-o", "json", env=second.env).stdout)
        assert [s["id"] for s in listed] == [sid]
        assert ironflow("sandbox", "close", sid, env=second.env).returncode == 0
        _until(lambda: not running(record.pid), "the sandbox outlived its close")
        assert not record.dir.exists()
    finally:
        _stop(second)


def test_a_kept_session_whose_sandbox_died_is_gone_and_cleaned(state: Path, env: dict[str, str]) -> None:
    first = start_serve(env, "--keep-sessions")
    try:
        dead = ironflow("sandbox", "open", "--ttl", "5m", env=first.env).stdout.strip()
        alive = ironflow("sandbox", "open", "--ttl", "5m", env=first.env).stdout.strip()
    finally:
        _stop(first)
    records = _records(state)
    os.killpg(records[dead].pid, signal.SIGKILL)
    _until(lambda: not running(records[dead].pid), "the killed sandbox still runs")
    second = start_serve(env, "--keep-sessions")
    try:
        gone = ironflow("sandbox", "exec", dead, "--", "true", env=second.env)
        assert gone.returncode == 2
        assert gone.stderr.strip().splitlines() == [f"error: no open sandbox session '{dead}'"]
        _until(lambda: not records[dead].dir.exists(), "the dead session's directory was left")
        for directory in records[dead].cgroup.values():
            assert not os.path.exists(directory)
        assert ironflow("sandbox", "exec", alive, "--", "true", env=second.env).returncode == 0
    finally:
        _stop(second)
