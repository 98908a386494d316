"""Directory watches of the session runtime: ``GET /ironflow/v1/watch/<path>[?recursive=1]``.

Linux inotify by ``ctypes`` (standard library only, like the siblings), loaded by the first watch
request, never at start. The answer is newline-delimited JSON: a first line naming the watched
directory, then one line per event, ``{"type": "create"|"write"|"remove"|"rename", "name": …,
"is_dir": …}`` (a rename adds ``old_name``; a move into the tree is a create, out of it a remove),
names relative to the watched directory; ``{"type": "overflow", "dropped": N|null, "name": …}``
when events were lost (``N`` of them for a slow client, null when the kernel's queue overflowed,
``name`` the directory left unwatched past the watch limit); ``{}`` as a heartbeat, so a relay
notices a client that went.

Security: names only, never a file's content or metadata (a symlink's create is reported as its
own, never followed). A watch is added on a directory opened component by component with
``O_NOFOLLOW`` from the watched root, through its ``/proc/self/fd`` link, so a symlink swapped in
never makes one land outside. An event is reported only when the directory it came from is found
again under its name, with no symlink on the way and as the same inode that was watched (a
directory moved out of the tree is unwatched, one replaced is dropped), and again on delivery to
the client: its parent must still resolve beneath the watched root.

Bounds: :data:`MAX_STREAMS` watches at once per runtime, ``max_watches`` directories per watch (a
recursive watch of a larger tree is refused; one past it later is an overflow event), and
``max_events`` events waiting for a slow client (the rest counted, one overflow event). A watch ends
when its client goes (a failed write, or its socket's end, seen within a second), when the watched
directory is removed or moved, and with the runtime.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import stat
import struct
import threading
import time

from streams import Chunked, HttpError  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

__all__ = ["MAX_EVENTS", "MAX_STREAMS", "MAX_WATCHES", "Watch", "open_beneath", "records", "serve"]

#: Watches open at once in one runtime (each holds a thread and an inotify instance).
MAX_STREAMS = 16
#: Directories one watch holds (a recursive one adds one per directory of the tree).
MAX_WATCHES = 4096
#: Events one watch keeps waiting for its client; a request may ask for fewer (``max_events``).
MAX_EVENTS = 4096
_HEARTBEAT_S = 10.0
_PAIR_WAIT_MS = 10  # a move's second half, when a read ended between the two
_IN_MODIFY, _IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x2, 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_IN_ONLYDIR, _IN_EXCL_UNLINK, _IN_ISDIR = 0x1000000, 0x4000000, 0x40000000
_MASK = _IN_MODIFY | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; the name follows
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_active = [0]
_active_lock = threading.Lock()


def records(data: bytes) -> Iterator[tuple[int, int, int, str]]:
    """The ``(wd, mask, cookie, name)`` of each inotify event in one read."""
    at = 0
    while at + _HEADER.size <= len(data):
        wd, mask, cookie, size = _HEADER.unpack_from(data, at)
        name = data[at + _HEADER.size : at + _HEADER.size + size].split(b"\0", 1)[0]
        at += _HEADER.size + size
        yield wd, mask, cookie, os.fsdecode(name)


def open_beneath(base: str, rel: str) -> int:
    """An ``O_PATH`` fd of the directory ``rel`` under ``base``, each component opened from the last
    with ``O_NOFOLLOW`` (OSError at a symlink, a file, ``..``)."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for part in rel.split("/") if rel else ():
            if part in ("", ".", ".."):
                raise NotADirectoryError(f"not a plain path: {rel}")
            parent, fd = fd, -1
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=parent)
            finally:
                os.close(parent)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW may open a symlink itself
            raise NotADirectoryError(f"not a directory: {rel}")
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return fd


def _beneath(base: str, rel_dir: str) -> bool:
    """The directory ``rel_dir`` still resolves beneath ``base`` (a path that is gone resolves as named)."""
    real = os.path.realpath(os.path.join(base, rel_dir) if rel_dir else base)
    return real == base or real.startswith(base + os.sep)


class Watch:
    """One inotify instance over a directory (and, ``recursive``, its tree), its events queued."""

    def __init__(self, base: str, *, recursive: bool, max_events: int, max_watches: int = MAX_WATCHES) -> None:
        self.base, self.recursive = base, recursive
        self.max_events, self.max_watches = max_events, max_watches
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs: dict[int, tuple[str, tuple[int, int]]] = {}  # wd: its path from base, its (dev, inode)
        self.queue: list[tuple[dict[str, Any], tuple[str, ...]]] = []  # an event, the parents it names
        self.dropped, self.unknown, self.ended = 0, False, False
        self.moved: tuple[int, str, bool, str] | None = None  # a move's first half: cookie, name, is_dir, parent
        self.checked: dict[int, str | None] = {}  # current() of each wd, for one read of events (see one())
        self.cond = threading.Condition()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.thread: threading.Thread | None = None
        try:
            self.add("")
            if recursive:
                self.add_tree("", refuse=True)
        except BaseException:
            self.close()
            raise

    def add(self, rel: str) -> bool:
        """Watch the directory ``rel`` (opened beneath the root); False past the watch limit."""
        if len(self.dirs) >= self.max_watches:
            return False
        fd = open_beneath(self.base, rel)
        try:
            st = os.fstat(fd)
            # the magic link is the opened directory itself, whatever its path has become since
            wd = self.libc.inotify_add_watch(
                self.fd, f"/proc/self/fd/{fd}".encode(), _MASK | _IN_ONLYDIR | _IN_EXCL_UNLINK
            )
            if wd < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"inotify_add_watch: {os.strerror(err)}")
        finally:
            os.close(fd)
        self.dirs[wd] = (rel, (st.st_dev, st.st_ino))
        return True

    def add_tree(self, rel: str, *, refuse: bool = False) -> str | None:
        """Watch every directory under ``rel`` (no symlink followed); past the limit, a 400 at the
        start (``refuse``), else the first one left out (for an overflow event)."""
        for path, subdirs, _files in os.walk(os.path.join(self.base, rel) if rel else self.base):
            for sub in subdirs:
                sub_rel = os.path.relpath(os.path.join(path, sub), self.base)
                try:
                    added = self.add(sub_rel)
                except OSError:  # gone, or swapped for a symlink or a file since it was listed
                    continue
                if not added and refuse:
                    raise HttpError(400, f"more than {self.max_watches} directories to watch: watch a smaller tree")
                if not added:
                    return sub_rel
        return None

    def current(self, wd: int) -> str | None:
        """The path of ``wd``'s directory from the root, if it is still there by that path, no symlink
        on it, the same inode; a directory replaced since is unwatched (None)."""
        rel, ident = self.dirs[wd]
        path = os.path.join(self.base, rel) if rel else self.base
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return rel  # renamed (its move comes next) or removed; it was beneath when its events came
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != ident or os.path.realpath(path) != path:
            self.forget(rel)
            return None
        return rel

    def forget(self, prefix: str) -> None:
        """Unwatch ``prefix`` and every directory under it."""
        self.checked = {}
        for wd, (rel, _) in list(self.dirs.items()):
            if prefix == "" or rel == prefix or rel.startswith(prefix + "/"):
                self.libc.inotify_rm_watch(self.fd, wd)
                self.dirs.pop(wd, None)

    def push(self, event: dict[str, Any], parents: tuple[str, ...]) -> None:
        with self.cond:
            if len(self.queue) >= self.max_events:
                self.dropped += 1
                self.unknown = self.unknown or event["type"] == "overflow"  # the kernel's: a count no more
                return
            self.overflowed()
            if event["type"] == "write" and self.queue and self.queue[-1][0] == event:
                return  # one write event per burst of writes the client has not taken yet
            self.queue.append((event, parents))
            self.cond.notify()

    def overflowed(self) -> None:
        """Under the lock: the overflow event of what was dropped, if anything was."""
        if self.dropped:
            dropped = None if self.unknown else self.dropped
            self.queue.append(({"type": "overflow", "dropped": dropped, "name": ""}, ()))
            self.dropped, self.unknown = 0, False

    def end(self) -> None:
        with self.cond:
            self.ended = True
            self.cond.notify()

    def run(self) -> None:
        """The reader: inotify's events into the queue, until :meth:`close` or the root goes."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        poller.register(self.wake_r, select.POLLIN)
        while not self.ended:
            ready = dict(poller.poll(None if self.moved is None else _PAIR_WAIT_MS))
            if self.wake_r in ready:
                return
            if not ready:
                self.moved_out()
                continue
            with contextlib.suppress(BlockingIOError):
                self.read(os.read(self.fd, 65536))

    def read(self, data: bytes) -> None:
        """One read's records: each directory's path is checked once in it, not once per event."""
        self.checked = {}
        for record in records(data):
            self.one(*record)

    def one(self, wd: int, mask: int, cookie: int, name: str) -> None:
        if mask & _IN_Q_OVERFLOW:
            return self.push({"type": "overflow", "dropped": None, "name": ""}, ())
        if self.moved is not None and not (mask & _IN_MOVED_TO and cookie == self.moved[0]):
            self.moved_out()
        if wd not in self.dirs:
            return None
        if mask & (_IN_ISDIR | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
            self.checked = {}  # a directory came, went or moved: each path is checked anew
        if mask & (_IN_IGNORED | _IN_DELETE_SELF | _IN_MOVE_SELF):
            if self.dirs[wd][0] == "":
                self.end()  # the watched directory itself is gone or moved
            if mask & _IN_IGNORED:
                self.dirs.pop(wd, None)
            return None
        if wd not in self.checked:  # a read's thousand creates in one directory: one check, not a thousand
            self.checked[wd] = self.current(wd)  # (under gVisor each is file I/O through the gofer)
        if (parent := self.checked[wd]) is None:
            return None
        rel = f"{parent}/{name}" if parent else name
        is_dir = bool(mask & _IN_ISDIR)
        if mask & _IN_MOVED_FROM:
            self.moved = (cookie, rel, is_dir, parent)
        elif mask & _IN_MOVED_TO and self.moved is not None:
            self.renamed(rel, parent, is_dir)
        elif mask & (_IN_CREATE | _IN_MOVED_TO):
            self.created(rel, parent, is_dir)
        elif mask & _IN_DELETE:
            self.push({"type": "remove", "name": rel, "is_dir": is_dir}, (parent,))
        elif mask & _IN_MODIFY and not is_dir:
            self.push({"type": "write", "name": rel, "is_dir": False}, (parent,))
        return None

    def renamed(self, rel: str, parent: str, is_dir: bool) -> None:
        """A move's second half: a rename; the watches under it keep their inodes, with new names."""
        assert self.moved is not None
        _, old, _, old_parent = self.moved
        self.moved = None
        for other, (path, ident) in list(self.dirs.items()):
            if path == old or path.startswith(old + "/"):
                self.dirs[other] = (rel + path[len(old) :], ident)
        self.push({"type": "rename", "name": rel, "old_name": old, "is_dir": is_dir}, (parent, old_parent))

    def created(self, rel: str, parent: str, is_dir: bool) -> None:
        """A new entry (or one moved in); a directory's tree is watched too when recursive, before
        its create is said: a client that writes in it once it hears of it has its writes seen."""
        left_out = None
        if is_dir and self.recursive:
            with contextlib.suppress(OSError):
                left_out = self.add_tree(rel) if self.add(rel) else rel
        self.push({"type": "create", "name": rel, "is_dir": is_dir}, (parent,))
        if left_out is not None:
            self.push({"type": "overflow", "dropped": 0, "name": left_out}, ())

    def moved_out(self) -> None:
        """A move with no second half: it left the tree, a remove (its watches go)."""
        if self.moved is None:
            return
        _, rel, is_dir, parent = self.moved
        self.moved = None
        if is_dir:
            self.forget(rel)
        self.push({"type": "remove", "name": rel, "is_dir": is_dir}, (parent,))

    def take(self, timeout: float) -> tuple[list[dict[str, Any]], bool]:
        """The events waiting (after up to ``timeout`` s for one), each re-checked; and whether it ended."""
        with self.cond:
            if not self.queue and not self.ended and not self.dropped:
                self.cond.wait(timeout)
            self.overflowed()
            batch, self.queue = self.queue, []
            ended = self.ended
        base_ok = os.path.realpath(self.base) == self.base
        return [e for e, parents in batch if base_ok and all(_beneath(self.base, p) for p in parents)], ended

    def close(self) -> None:
        if self.thread is not None:
            os.write(self.wake_w, b"\0")
            self.thread.join()
        for fd in (self.fd, self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _gone(conn: Any) -> bool:
    """The client closed its end (or sent something, which a watch's connection never carries)."""
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLRDHUP)
    return bool(poller.poll(0))


def serve(handler: Any, path: str, query: dict[str, list[str]]) -> None:
    """Stream the events under ``path`` (resolved beneath the workspace) to ``handler``'s client."""
    if not os.path.isdir(path):
        raise HttpError(404, "Path is not a directory")
    recursive = query.get("recursive", ["0"])[0] in ("1", "true")
    wanted = int(query.get("max_events", [str(MAX_EVENTS)])[0])
    if not 1 <= wanted <= MAX_EVENTS:
        raise HttpError(400, f"max_events must be between 1 and {MAX_EVENTS}")
    with _active_lock:
        if _active[0] >= MAX_STREAMS:
            raise HttpError(409, f"{MAX_STREAMS} watches are open in this session already: end one first")
        _active[0] += 1
    try:
        try:
            watch = Watch(path, recursive=recursive, max_events=wanted)
        except (PermissionError, NotADirectoryError, FileNotFoundError):
            raise HttpError(403, "Access denied") from None
        except OSError as exc:  # the kernel's inotify limits (EMFILE, ENOSPC)
            raise HttpError(409, f"cannot watch: {exc.strerror or exc}") from None
        try:
            _stream(handler, watch, os.path.relpath(path, handler.rt.root), recursive)
        finally:
            watch.close()
    finally:
        with _active_lock:
            _active[0] -= 1


def _stream(handler: Any, watch: Watch, rel: str, recursive: bool) -> None:
    handler.keep = False  # the stream ends with the connection
    handler.head(200, "application/x-ndjson", chunked=True)
    chunks = Chunked(handler.wfile)
    chunks.write(json.dumps({"watching": rel, "recursive": recursive}).encode() + b"\n")
    watch.thread = threading.Thread(target=watch.run, name="watch", daemon=True)
    watch.thread.start()
    last = time.monotonic()
    while True:
        events, ended = watch.take(1.0)
        if events:
            chunks.write(b"".join(json.dumps(e).encode() + b"\n" for e in events))
            last = time.monotonic()
        elif time.monotonic() - last >= _HEARTBEAT_S:
            chunks.write(b"{}\n")
            last = time.monotonic()
        if ended:
            chunks.end()
            return None
        if _gone(handler.conn):
            return None
