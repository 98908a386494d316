"""A kept local session's record (:mod:`ironflow.local.sessions.adoption`): written 0600 and read back,
its process matched by start time, and a record naming a cgroup that is not a kept session's ignored
(a server never kills a worker's cgroup on a record's word)."""

from __future__ import annotations

import json
import os
import time
import types
from pathlib import Path
from typing import Any

from ironflow.local.sandbox import cgroups
from ironflow.local.sessions import adoption
from ironflow.local.sessions.starter import StartedSession
from ironflow.secrets import Secret
from ironflow.sessions import SessionInfo


def _session(directory: Path, token: str, cgroup: dict[str, str]) -> StartedSession:
    """A session as the table holds it: this test's process stands for its sandbox's first one."""
    now = time.time()
    info = SessionInfo("sbx-0123456789abcdef", "local", "bwrap", now, now + 60)
    group = cgroups.SandboxCgroup.adopt(cgroups.Support(1), cgroup)
    me: Any = types.SimpleNamespace(pid=os.getpid())
    return StartedSession(info, str(directory), "/s/rt.sock", Secret(token), me, group)


def test_a_record_is_written_0600_and_read_back_with_its_process(tmp_path: Path) -> None:
    directory = tmp_path / "ifs-a"
    directory.mkdir(mode=0o700)
    cgroup = {"pids": "/sys/fs/cgroup/pids/ironflow-kept-1-1"}
    adoption.save(_session(directory, "kept-token-7f3a", cgroup))
    assert oct((directory / adoption.RECORD).stat().st_mode & 0o777) == "0o600"
    [record] = adoption.found(str(tmp_path), "ifs-")
    assert (record.info.id, record.socket_path, record.token.reveal(), record.cgroup) == (
        "sbx-0123456789abcdef",
        "/s/rt.sock",
        "kept-token-7f3a",
        cgroup,
    )
    assert "kept-token-7f3a" not in repr(record)
    assert record.alive(time.time())
    assert not record.alive(record.info.expires_at)  # its TTL passed


def test_a_record_of_another_process_or_a_worker_s_cgroup_is_not_taken(tmp_path: Path) -> None:
    directory = tmp_path / "ifs-b"
    directory.mkdir(mode=0o700)
    adoption.save(_session(directory, "t", {"pids": "/sys/fs/cgroup/pids/ironflow-1-1"}))
    assert list(adoption.found(str(tmp_path), "ifs-")) == []
    doc = json.loads((directory / adoption.RECORD).read_text())
    doc["cgroup"], doc["start_time"] = {}, doc["start_time"] + 1  # the pid reused by another process
    (directory / adoption.RECORD).write_text(json.dumps(doc))
    [record] = adoption.found(str(tmp_path), "ifs-")
    assert not record.alive(time.time())
