"""The HTTP body and pipe plumbing of the session runtime (:mod:`ironflow.sandbox_runtime.server`).

Standard library only and nothing of ironflow, like the server beside it, which imports
this file by path: a request body read in bounded pieces (Content-Length or chunked), a
chunked response writer, and a streaming multipart/form-data reader. Nothing here buffers
a whole body; and the lingering close of a connection whose request body went unread. For
commands: one poll loop over a command's pipes or its pty (no thread per pipe: a round trip costs
little more than the command), stdin kept open for writes that come later (queued, bounded, fed by
that loop), and the processes a command left.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.py imports enum
import _socket
import _thread
import codecs
import os
import select
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling files, when imported by the package
from lite import Condition, suppress  # type: ignore[import-not-found]
from popen import DEVNULL, PIPE  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any, BinaryIO

__all__ = ["Body", "Chunked", "Command", "HttpError", "Multipart", "leftovers", "linger", "response_head"]

_CHUNK = 65536
_MAX_HEADER_BYTES = 65536
_MAX_JSON_BYTES = 8 << 20
#: How long a connection closed with its request's body unread still takes (and drops) bytes.
_LINGER_S = 5.0
#: How long a command's pipes are still read once it ended: a process it left may hold them.
_DRAIN_S = 1.0
#: How often the exit of a command is looked for where no pidfd tells it.
_POLL_S = 0.05
_UTF8 = codecs.getincrementaldecoder("utf-8")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 413: "Too Large"}


def response_head(status: int, ctype: str, *, length: int | None, chunked: bool, keep: bool) -> bytes:
    """An answer's status line and headers, framed by Content-Length or chunked."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}", f"Content-Type: {ctype}"]
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length or 0}")
    lines.append("Connection: keep-alive" if keep else "Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def linger(conn: _socket.socket, wfile: BinaryIO, seconds: float = _LINGER_S) -> None:
    """Let the client read an answer sent before its request's body was read (a 413, a 401).

    Closing a socket with bytes still unread resets the connection, and a client still sending
    may then lose the answer for the broken connection. As a web server's lingering close: end
    our side, then read and drop what still comes, for ``seconds`` at most.
    """
    with suppress(OSError, ValueError):
        wfile.flush()
        conn.shutdown(_socket.SHUT_WR)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(min(left, 1.0))
            if not conn.recv(_CHUNK):
                return


class HttpError(Exception):
    """An answer other than 200: status and the JSON message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Body:
    """A request body read in pieces (Content-Length or chunked), never more than ``limit``."""

    def __init__(self, rfile: BinaryIO, headers: dict[str, str], limit: int) -> None:
        self.rfile, self.limit, self.seen = rfile, limit, 0
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self.left = 0 if self.chunked else int(headers.get("content-length") or 0)
        self.done = not self.chunked and self.left == 0
        if self.left > limit:
            raise HttpError(413, f"Request body exceeds the limit of {limit} bytes")

    def read(self, n: int = _CHUNK) -> bytes:
        if self.done:
            return b""
        if self.chunked and self.left == 0:
            size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                self.done = True
                return b""
            self.left = size
        data = self.rfile.read(min(n, self.left))
        if not data:
            raise ConnectionError("client went away")
        self.left -= len(data)
        self.seen += len(data)
        if self.seen > self.limit:
            raise HttpError(413, f"Request body exceeds the limit of {self.limit} bytes")
        if self.left == 0:
            if self.chunked:
                self.rfile.readline(8)
            else:
                self.done = True
        return data

    def all(self, limit: int = _MAX_JSON_BYTES) -> bytes:
        """The whole body, for a JSON document: at most ``limit`` bytes in memory."""
        parts, size = [], 0
        while data := self.read():
            size += len(data)
            if size > limit:
                raise HttpError(413, f"Request body exceeds the limit of {limit} bytes")
            parts.append(data)
        return b"".join(parts)


class Chunked:
    """A file-like writer of one chunked response body."""

    def __init__(self, wfile: BinaryIO) -> None:
        self.wfile = wfile

    def write(self, data: bytes, *, flush: bool = True) -> int:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            if flush:
                self.wfile.flush()
        return len(data)

    def end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class Multipart:
    """A streaming multipart/form-data reader: part headers, then the part's bytes in pieces."""

    def __init__(self, body: Body, boundary: bytes) -> None:
        self.body, self.delim = body, b"\r\n--" + boundary
        self.buf, self.in_part, self.ended = b"\r\n", False, False

    def _fill(self) -> bool:
        data = self.body.read()
        self.buf += data
        return bool(data)

    def next_part(self) -> tuple[str, str | None] | None:
        """The next part's field name and file name, or None after the last."""
        if self.ended:
            return None
        while (at := self.buf.find(self.delim)) < 0:
            self.buf = self.buf[-len(self.delim) :]  # what may be the start of a delimiter
            if not self._fill():
                return None
        self.buf = self.buf[at + len(self.delim) :]
        while len(self.buf) < 2 and self._fill():
            pass
        if self.buf.startswith(b"--"):
            self.ended = True
            return None
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > _MAX_HEADER_BYTES or not self._fill():
                raise HttpError(400, "malformed multipart body")
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.in_part = True
        disposition = next(
            (h for h in raw.decode("utf-8").split("\r\n") if h.lower().startswith("content-disposition")), ""
        )
        params: dict[str, str] = {}
        for item in disposition.split(";")[1:]:
            key, _, value = item.strip().partition("=")
            params[key.lower()] = value.strip('"')
        filename = params.get("filename")
        if "filename*" in params:
            filename = __import__("urllib.parse").parse.unquote(params["filename*"].split("''", 1)[-1])
        elif filename is not None:
            filename = filename.replace("%22", '"').replace("%0D", "\r").replace("%0A", "\n")
        return params.get("name", ""), filename

    def read(self, n: int = _CHUNK) -> bytes:
        """The current part's next bytes; b"" at its end (the delimiter stays in the buffer)."""
        if not self.in_part:
            return b""
        while self.delim not in self.buf and len(self.buf) < n + len(self.delim):
            if not self._fill():
                raise HttpError(400, "malformed multipart body")
        at = self.buf.find(self.delim)
        if at == 0:
            self.in_part = False
            return b""
        cut = at if at > 0 else len(self.buf) - len(self.delim)
        data, self.buf = self.buf[:cut], self.buf[cut:]
        return data

    def skip(self) -> None:
        while self.read():
            pass

    def skip_rest(self) -> None:
        while self.next_part() is not None:
            self.skip()
        while self.body.read():
            pass


def leftovers(session: int, pipes: Collection[int]) -> list[int]:
    """Pids of the processes in ``session`` or holding one of the pipes ``pipes`` (inode numbers),
    this process aside: what a command left behind, in its session or out of it (``setsid``)."""
    links = {f"pipe:[{inode}]" for inode in pipes}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        with suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            if int(fields[3]) == session or _holds(name, links):
                found.append(int(name))
    return found


def _holds(pid: str, links: set[str]) -> bool:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in links:
                return True
    return False


class Command:
    """One process and its events (bounded), for any waiter, which streams them from the start.

    No thread of its own: its driver (the thread that started it: a request's handler, or one
    thread for a background command) runs one poll loop over its stdout, stderr and stdin pipes
    and a pidfd of it, and pushes the events; any other waiter only waits for them.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        stdin: bytes | None,
        cap: int,
        spawn: Any,
        *,
        keep_stdin: bool = False,
        tty: tuple[int, int] | None = None,
    ) -> None:
        """``keep_stdin``: stdin stays open for :meth:`write_stdin`; ``tty``: (cols, rows) of a pty
        the command runs in (``terminal.py``), its output one stream, its stdin kept open."""
        self.events: list[dict[str, Any]] = []
        self.cond = Condition()
        self.sizes = {"stdout": 0, "stderr": 0}
        self.decoders = {name: _UTF8(errors="replace") for name in self.sizes}  # a character split between reads
        self.cap, self.finished, self.timed_out = cap, False, False
        self.deadline: float | None = None  # the driver's: past it the group is killed
        self.proc: Any = None  # popen.py's Process (or subprocess.Popen)
        self.inlock = _thread.allocate_lock()  # stdin, the pty and the wake pipe, between the driver and writers
        self.keep_stdin, self.eof, self.tty = keep_stdin or tty is not None, False, tty
        self.master, self.wake_fd = -1, -1
        piped = PIPE if stdin is not None or self.keep_stdin else DEVNULL
        io: dict[str, Any] = {"stdout": PIPE, "stderr": PIPE, "stdin": piped}
        if tty is not None:
            self.master, slave, io = __import__("terminal").open_pty(*tty)
        try:
            self.proc = spawn(argv, cwd=cwd, env=env, start_new_session=True, **io)
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126 if isinstance(exc, PermissionError) else 1
            self._push({"stderr": f"{argv[0]}: {exc.strerror or exc}\n"})
            self._push({"exit_code": code, "timed_out": False})
            if self.master >= 0:
                os.close(self.master)
                self.master = -1  # no resize reaches a closed (or reused) fd
            return
        finally:
            if tty is not None:
                os.close(slave)  # the command's only: the master reads EOF (EIO) once it and its children end
        self.pipes: list[int] = []
        if self.master >= 0:
            out: Any = os.fdopen(self.master, "rb", buffering=0)
            err: Any = None
            into: Any = os.fdopen(os.dup(self.master), "wb", buffering=0)
        else:
            out, err, into = self.proc.stdout, self.proc.stderr, self.proc.stdin
            self.pipes = [os.fstat(s.fileno()).st_ino for s in (out, err) if s is not None]
        assert out is not None
        self.names = {out.fileno(): "stdout"}
        self.files: dict[int, Any] = {out.fileno(): out}
        if err is not None:
            self.names[err.fileno()], self.files[err.fileno()] = "stderr", err
        self.poller = select.poll()
        for fd in self.names:
            self.poller.register(fd, select.POLLIN)
        self.stdin, self.stdin_fd = memoryview(stdin or b""), -1
        if self.keep_stdin:
            wake, self.wake_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)  # a writer's nudge to the driver's poll
            self.files[wake] = os.fdopen(wake, "rb", buffering=0)
            self.poller.register(wake, select.POLLIN)
        if into is not None:
            self.stdin_fd = into.fileno()
            self.files[self.stdin_fd] = into
            os.set_blocking(self.stdin_fd, False)  # fed as the pipe takes it, between reads
            self.poller.register(self.stdin_fd, select.POLLOUT)
            if not self.stdin and not self.keep_stdin:
                self._close(self.stdin_fd)
        self.pidfd: int | None = None
        with suppress(OSError, AttributeError):  # none (gVisor, say): its exit is polled for
            pidfd = os.pidfd_open(self.proc.pid)
            self.poller.register(pidfd, select.POLLIN)
            self.pidfd = pidfd
        self.code: int | None = None
        self.drain_until = 0.0

    def _push(self, event: dict[str, Any]) -> None:
        with self.cond:
            self.events.append(event)
            self.finished = self.finished or "exit_code" in event
            self.cond.notify_all()

    def _emit(self, name: str, data: bytes, *, final: bool = False) -> None:
        room = self.cap - self.sizes[name]
        if room > 0:
            if text := self.decoders[name].decode(data[:room], final):
                self._push({name: text})
            if len(data) >= room:
                self._push({name: f"\n[ironflow-runtime: {name} truncated at {self.cap} bytes]\n"})
        self.sizes[name] += len(data)

    def _close(self, fd: int) -> None:
        with self.inlock:  # a writer or a resize never meets a closed (or reused) fd
            with suppress(KeyError, ValueError):
                self.poller.unregister(fd)
            self.names.pop(fd, None)
            self.stdin_fd = -1 if fd == self.stdin_fd else self.stdin_fd
            self.master = -1 if fd == self.master else self.master
            with suppress(OSError):
                self.files.pop(fd).close()

    def _feed(self, events: int = 0) -> None:
        """Write what stdin holds as the pipe takes it; closed at its end (the given bytes fed, or
        the end asked for), or when the command closed its side."""
        if self.stdin_fd < 0:
            return
        with self.inlock:
            pending = self.stdin
        sent = 0
        try:
            if pending:
                sent = os.write(self.stdin_fd, pending[:_CHUNK])
            elif events & (select.POLLERR | select.POLLHUP):
                sent = -1
        except BlockingIOError:
            pass
        except OSError:  # the command closed its stdin: the rest is dropped, as a shell's pipe would
            sent = -1
        with self.inlock:
            self.stdin = self.stdin[len(self.stdin) if sent < 0 else sent :]
            empty, ended = not self.stdin, sent < 0 or self.eof or not self.keep_stdin
        if empty and ended:
            self._close(self.stdin_fd)
        else:  # kept open: polled for an error only until a writer brings more
            self.poller.register(self.stdin_fd, 0 if empty else select.POLLOUT)

    def write_stdin(self, data: bytes, limit: int, wait: float, *, eof: bool = False) -> int:
        """Queue ``data`` (then the end, with ``eof``) for the command's stdin, waiting up to ``wait``
        seconds while it holds ``limit`` bytes unread; 409 once it ended or its stdin closed."""
        deadline = time.monotonic() + wait
        while True:
            with self.inlock:
                if self.finished or self.proc is None or self.code is not None:  # a spawn that failed has no code
                    raise HttpError(409, "the command has ended")
                if not self.keep_stdin or self.stdin_fd < 0 or self.eof:
                    raise HttpError(409, "the command's stdin is closed (keep it open with keep_stdin)")
                if not self.stdin or len(self.stdin) + len(data) <= limit:
                    self.stdin, self.eof = memoryview(bytes(self.stdin) + data), eof
                    with suppress(BlockingIOError):  # full: the driver wakes anyway
                        os.write(self.wake_fd, b"\0")
                    return len(data)
            if time.monotonic() >= deadline:
                raise HttpError(409, f"the command has not read its stdin ({limit} bytes waiting)")
            time.sleep(0.01)

    def _step(self) -> None:
        """One turn of the poll loop: read what came, feed stdin, notice the exit; the exit event
        once the process ended and its pipes closed, or ``_DRAIN_S`` later (a process it left, out
        of its group by ``setsid``, may hold them open long after)."""
        assert self.proc is not None
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            self.deadline = None
            self.kill(timed_out=True)
        wait = (None if self.deadline is None else self.deadline - now) if self.code is None else self.drain_until - now
        if self.pidfd is None and self.code is None:
            wait = _POLL_S if wait is None else min(wait, _POLL_S)
        if self.pidfd is None and self.code is None and not self.names and self.stdin_fd < 0:  # no fd left to poll
            self._exited(self._reap(wait))
        else:
            for fd, events in self.poller.poll(None if wait is None else max(0, -int(-wait * 1000 // 1))):
                if fd in self.names:
                    try:
                        data = os.read(fd, _CHUNK)
                    except OSError:  # a pty with no other end left: EIO, its end
                        data = b""
                    if data:
                        self._emit(self.names[fd], data)
                    else:
                        self._emit(self.names[fd], b"", final=True)
                        self._close(fd)
                elif fd == self.stdin_fd:
                    self._feed(events)
                elif fd in self.files:  # the wake pipe: a writer brought more, or the end
                    with suppress(OSError):
                        os.read(fd, _CHUNK)
                    self._feed()
            if self.code is None:
                self._exited(self.proc.poll())
        if self.code is not None and (not self.names or time.monotonic() >= self.drain_until):
            for fd in list(self.files):
                self._close(fd)
            with self.inlock:
                if self.wake_fd >= 0:
                    os.close(self.wake_fd)
                    self.wake_fd = -1
            self._push({"exit_code": 128 - self.code if self.code < 0 else self.code, "timed_out": self.timed_out})

    def _reap(self, wait: float | None) -> int | None:
        """Its exit code, looked for until ``wait`` seconds passed (where no pidfd tells it)."""
        deadline = time.monotonic() + (_POLL_S if wait is None else wait)
        while (code := self.proc.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.002)
        return code  # type: ignore[no-any-return]

    def _exited(self, code: int | None) -> None:
        if code is None or self.proc is None:
            return
        self.code = code
        if self.pidfd is not None:
            self.poller.unregister(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        with suppress(OSError):  # what the command left in its process group goes with it
            os.killpg(self.proc.pid, _signal.SIGKILL)
        self.drain_until = time.monotonic() + _DRAIN_S

    def finish(self) -> None:
        """Drive the command to its end (its driver's, whether or not anyone still follows it)."""
        while not self.finished:
            self._step()

    def kill(self, *, timed_out: bool = False) -> bool:
        """SIGKILL to the command's group, its session and whatever holds its pipes (a ``setsid`` child)."""
        if self.proc is None or self.finished:
            return False
        self.timed_out = self.timed_out or timed_out
        with suppress(OSError):
            os.killpg(self.proc.pid, _signal.SIGKILL)
        for pid in leftovers(self.proc.pid, self.pipes):
            with suppress(OSError):
                os.kill(pid, _signal.SIGKILL)
        return True

    def batches(self, timeout: float | None, *, drive: bool = False) -> Any:
        """The events from the first, in lists as they come; past ``timeout`` seconds the group is
        killed. With ``drive``, this thread runs the poll loop (then :meth:`finish` after it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if drive:
            self.deadline = deadline
        index = 0
        while True:
            with self.cond:
                while not drive and index >= len(self.events):
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        self.kill(timed_out=True)
                        deadline = None
                    self.cond.wait(left)
                batch = self.events[index:]
            index += len(batch)
            if batch:
                yield batch
            if batch and "exit_code" in batch[-1]:
                return
            if drive:
                self._step()

    def follow(self, timeout: float | None, *, drive: bool = False) -> Any:
        """Each event from the first, as :meth:`batches` gives them."""
        for batch in self.batches(timeout, drive=drive):
            yield from batch
