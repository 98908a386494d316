"""Local sessions kept across their server's restart: each one's record, and finding them again (I/O).

With ``ironflow sandbox serve --keep-sessions`` (bubblewrap only) a session's sandbox does not
die with its server: no ``--die-with-parent``, no parent-death signal, a cgroup named so no
sweep takes it, and a runtime that ends itself at the session's TTL (``expires_at`` at
hand-out). Its record, ``kept.json`` (0600) in the session's private directory (0700), holds
what the next server needs to serve it again: its info, its runtime socket, the sandbox's first
process (pid and start time: a reused pid is not it), its cgroup, and the runtime's token. The
token is in plain text: the runtime takes its token once, at hand-out, and the file's only
reader is the user the server and the sandbox run as (docs/threat-model.md). Sessions with a
workspace, an agent or egress are never kept (their host copies and proxies end with the
server). A record whose process is gone or whose TTL has passed is cleaned: its cgroup killed
and removed, its directory removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any, Final

from ironflow.local import workdirs
from ironflow.local.sandbox import cgroups
from ironflow.local.sessions.starter import StartedSession
from ironflow.secrets import Secret
from ironflow.sessions.values import SessionInfo, check_session_id

__all__ = ["RECORD", "AdoptedProcess", "Kept", "adopt", "clean", "found", "save"]

log = logging.getLogger("ironflow.local")

#: A kept session's record, in its private directory.
RECORD: Final = "kept.json"
_MAX_RECORD_BYTES: Final = 65536


@dataclasses.dataclass(frozen=True)
class Kept:
    """A kept session as its record has it."""

    directory: str
    info: SessionInfo
    socket_path: str
    token: Secret
    pid: int
    start_time: int
    cgroup: dict[str, str]

    def alive(self, now: float) -> bool:
        """Its sandbox's first process still runs (the same one: its start time; not a zombie waiting
        for init) and its TTL has not passed."""
        return now < self.info.expires_at and workdirs.start_time(self.pid) == self.start_time and _running(self.pid)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def save(session: StartedSession) -> None:
    """Write the record of a session just handed out (0600, replaced whole)."""
    start = workdirs.start_time(session.proc.pid)
    if start is None:
        return  # gone already: nothing to keep
    doc = {
        "info": session.info.to_json(),
        "socket_path": session.socket_path,
        "token": session.token.reveal(),
        "pid": session.proc.pid,
        "start_time": start,
        "cgroup": dict(session.group.dirs) if session.group is not None else {},
    }
    directory = session.directory
    temp = os.path.join(directory, RECORD + ".new")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    os.replace(temp, os.path.join(directory, RECORD))


def found(state_dir: str, prefix: str) -> Iterator[Kept]:
    """The records in ``state_dir``'s ``prefix*`` directories that read as ones (others are left to the sweep)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(state_dir):
            if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                fd = os.open(os.path.join(entry.path, RECORD), os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as f:
                    doc = json.loads(f.read(_MAX_RECORD_BYTES))
                info = SessionInfo.from_json(doc["info"])
                check_session_id(info.id)
                cgroup = {str(k): str(v) for k, v in dict(doc["cgroup"]).items()}
                if not all(os.path.basename(v).startswith(cgroups.KEPT_PREFIX) for v in cgroup.values()):
                    continue  # a record names only a kept session's cgroup: never a worker's to kill
                yield Kept(
                    entry.path,
                    info,
                    str(doc["socket_path"]),
                    Secret(str(doc["token"])),
                    int(doc["pid"]),
                    int(doc["start_time"]),
                    cgroup,
                )


async def clean(kept: Kept, support: cgroups.Support) -> None:
    """A kept session whose sandbox is gone (or past its TTL): whatever is left of it killed, its cgroup
    and directory removed."""
    if workdirs.start_time(kept.pid) == kept.start_time:
        with contextlib.suppress(OSError):
            os.killpg(kept.pid, signal.SIGKILL)
    if kept.cgroup:
        await cgroups.SandboxCgroup.adopt(support, kept.cgroup).remove()
    shutil.rmtree(kept.directory, ignore_errors=True)
    log.info("sandbox session %s of an earlier server is gone: cleaned", kept.info.id)


def _settle(ended: asyncio.Future[None]) -> None:
    if not ended.done():
        ended.set_result(None)


def adopt(
    state_dir: str, prefix: str, support: cgroups.Support, *, take: bool = True
) -> tuple[list[StartedSession], list[Kept]]:
    """The sessions an earlier server kept whose sandbox still runs, as this process's (their directories
    claimed), and the records of the dead ones (claimed too: this process cleans them, not the sweep);
    without ``take``, every record is one to clean (a server that keeps nothing ends them)."""
    now, sessions, gone = time.time(), [], []
    for record in found(state_dir, prefix):
        workdirs.claim(record.directory)
        try:
            proc = AdoptedProcess(record.pid) if take and record.alive(now) else None
        except OSError:
            proc = None
        if proc is None:
            gone.append(record)
            continue
        group = cgroups.SandboxCgroup.adopt(support, record.cgroup) if record.cgroup else None
        adopted: Any = proc  # the session table's Process: pid, returncode, wait, kill
        sessions.append(StartedSession(record.info, record.directory, record.socket_path, record.token, adopted, group))
        log.info("sandbox session %s of an earlier server found again", record.info.id)
    return sessions, gone


class AdoptedProcess:
    """A kept sandbox's first process, not this process's child: what the session table uses of an
    ``asyncio.subprocess.Process`` (``pid``, ``returncode``, ``wait``, ``kill``; no pipes), by a pidfd
    (a reused pid is never signalled). Its exit status is not ours to read: ``returncode`` is -1."""

    stdout = stderr = None

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._fd = os.pidfd_open(pid)

    async def wait(self) -> int:
        if self.returncode is None:
            loop = asyncio.get_running_loop()
            ended = loop.create_future()
            loop.add_reader(self._fd, _settle, ended)
            try:
                await ended
            finally:
                loop.remove_reader(self._fd)
            self.returncode = -1
            os.close(self._fd)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fd, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
