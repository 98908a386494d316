"""A kept local session's record (:mod:`ironflow.local.sessions.kept`): written 0600 and read back,
its process matched by start time, and a record naming a cgroup that is not a kept session's ignored
(a server never kills a worker's cgroup on a record's word)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ironflow.local.sessions import kept
from ironflow.secrets import Secret
from ironflow.sessions import SessionInfo


def _info(session_id: str = "sbx-0123456789abcdef", ttl: float = 60) -> SessionInfo:
    now = time.time()
    return SessionInfo(session_id, "local", "bwrap", now, now + ttl)


def test_a_record_is_written_0600_and_read_back_with_its_process(tmp_path: Path) -> None:
    directory = tmp_path / "ifs-a"
    directory.mkdir(mode=0o700)
    cgroup = {"pids": "/sys/fs/cgroup/pids/ironflow-kept-1-1"}
    kept.save(str(directory), _info(), "/s/rt.sock", Secret("kept-token-7f3a"), os.getpid(), cgroup)
    assert oct((directory / kept.RECORD).stat().st_mode & 0o777) == "0o600"
    [record] = kept.found(str(tmp_path), "ifs-")
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
    kept.save(str(directory), _info(), "/s", Secret("t"), os.getpid(), {"pids": "/sys/fs/cgroup/pids/ironflow-1-1"})
    assert list(kept.found(str(tmp_path), "ifs-")) == []
    doc = json.loads((directory / kept.RECORD).read_text())
    doc["cgroup"], doc["start_time"] = {}, doc["start_time"] + 1  # the pid reused by another process
    (directory / kept.RECORD).write_text(json.dumps(doc))
    [record] = kept.found(str(tmp_path), "ifs-")
    assert not record.alive(time.time())
