"""Inside a sandbox session: agent-sandbox's legacy runtime API, plus ironflow's extension.

Legacy endpoints, as the upstream python runtime (and its SDK) speak them: ``GET /``,
``POST /execute``, ``POST /upload``, ``GET /download|list|exists/<quoted path>``. Extension
(``/ironflow/v1/``): commands with argv, env, cwd and stdin that stream newline-delimited
JSON events and may run in the background (wait, kill), in a pty if asked, with stdin writes,
signals and resize after start (the sibling ``terminal.py``); raw file writes, removal, mkdir,
directory tar streams in and out, directory watches (the sibling ``watch.py``). Every path is
confined to the workspace (403).

Every request needs ``Authorization: Bearer <token>`` (401 otherwise); the token comes on an inherited
fd or a file deleted once read, never the environment, so the commands run here (with the runtime's own
scrubbed environment) never see it; a pod's main process listens first and takes its tokens by a FIFO
(``--token-fifo``, the sibling ``delivery.py``). With ``--prewarm`` the runtime sets itself up, says
``ironflow-runtime: warm`` and waits: a session pool holds it so, with no token, and hands it out with
one line carrying the token (and the session's environment and idle timeout). Uploads stream to disk
and stop at ``--max-upload-bytes`` (413); captured output keeps at most ``--max-output-bytes`` per
stream. A command not found exits 127, one that cannot run 126, as in a shell.

Run by path (``python3 -I server.py --unix PATH | --port N | --listen-fd N``): the standard
library only, nothing of ironflow, a thread per connection rather than an event loop (idle
cheap); a command runs in its request's thread, one poll loop over its pipes (a background one
gets a thread of its own). Its body plumbing and commands are the sibling file ``streams.py``
(the module-size rule keeps them two), its command line, listening socket, the start of its
commands' isolation and its hand-out line ``startup.py``. A local session adds
``--isolate-commands`` (the sibling ``confine.py``): its commands cannot reach the runtime's
process, memory, fds or socket, and the runtime refuses to start if that cannot be set up.
"""

from __future__ import annotations

import _operator
import _signal  # type: ignore[import-not-found]  # signal.py imports enum
import _socket
import _thread
import itertools
import os
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling file, when run by path
from lite import dumps, loads, start_thread, suppress  # type: ignore[import-not-found]
from popen import spawn  # type: ignore[import-not-found]
from streams import Body, Chunked, Command, HttpError, Multipart, linger, response_head  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    import types
    from typing import Any, BinaryIO

__all__ = ["main"]

_CHUNK = 65536
_BUFFER = 8192  # a socket file's, as makefile's (io.DEFAULT_BUFFER_SIZE)
#: Names the file of variables delivered after the start (a Kubernetes session's egress proxy
#: with its token, written by exec: never in the pod's manifest).
SESSION_ENV = "IRONFLOW_SESSION_ENV_FILE"
_MAX_HEADER_BYTES = 65536
_EXT = "/ironflow/v1/"


def delivered_env(env: dict[str, str]) -> dict[str, str]:
    """The variables of the file ``env[SESSION_ENV]`` names (a JSON object), under each command's
    own; none before it is written, or when it is unreadable (the commands then reach no proxy)."""
    path = env.get(SESSION_ENV)
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            doc = loads(f.read())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


class Runtime:
    """The workspace, the token, the limits, and the commands that are running."""

    def __init__(self, args: types.SimpleNamespace, token: bytes) -> None:
        self.root = os.path.realpath(args.workspace)
        self.expected = b"Bearer " + token
        self.max_upload, self.max_output = args.max_upload_bytes, args.max_output_bytes
        self.env = {**os.environ, **getattr(args, "env", {})}  # a hand-out's; pod_exec.py has none
        self.commands: dict[str, Command] = {}
        self.ids = itertools.count(1)
        self.lock = _thread.allocate_lock()
        self.last_active = time.monotonic()
        self.busy = 0
        self.spawn: Any = spawn  # with --isolate-commands, confine.py's
        self.gate: Any = None  # with --token-fifo, delivery.py's: the tokens come after the start

    def resolve(self, raw: str) -> str:
        """A client path inside the workspace (symlinks followed), or 403."""
        if "\x00" in raw:
            raise HttpError(403, "Access denied")
        path = os.path.realpath(os.path.join(self.root, raw))
        if path != self.root and not path.startswith(self.root + os.sep):
            raise HttpError(403, "Access denied")
        return path

    def start(self, spec: dict[str, Any]) -> tuple[str, Command]:
        argv = spec.get("argv")
        if argv is None:
            argv = _stdlib("shlex").split(str(spec.get("command", "")))
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise HttpError(400, "the command is empty")
        env = {**self.env, **delivered_env(self.env), **{str(k): str(v) for k, v in (spec.get("env") or {}).items()}}
        cwd = self.resolve(str(spec.get("cwd") or "."))
        stdin = spec.get("stdin")
        data = None if stdin is None else _stdlib("binascii").a2b_base64(stdin)  # what base64.b64decode calls
        tty = None
        if spec.get("pty"):
            tty = __import__("terminal").terminal_size(spec)
            env.setdefault("TERM", "xterm-256color")
        keep = bool(spec.get("keep_stdin"))
        command = Command(argv, env, cwd, data, self.max_output, self.spawn, keep_stdin=keep, tty=tty)
        with self.lock:
            cid = f"c{next(self.ids)}"
            self.commands[cid] = command
            finished = [k for k, c in self.commands.items() if c.finished and k != cid]
            for key in finished[:-64]:  # keep the last finished ones for a late wait
                del self.commands[key]
        return cid, command

    def idle_for(self) -> float:
        with self.lock:
            running = any(not c.finished for c in self.commands.values())
        return 0.0 if running or self.busy else time.monotonic() - self.last_active


class Handler:
    """One connection: requests in a loop while the client keeps it alive."""

    def __init__(self, runtime: Runtime, conn: _socket.socket) -> None:
        self.rt, self.conn = runtime, conn
        self.rfile, self.wfile = self.files(conn)
        self.keep = True
        self.started = False
        self.unread = False
        self.quiet = False
        self.body: Body | None = None

    @staticmethod
    def files(conn: Any) -> tuple[BinaryIO, BinaryIO]:
        """The connection's files to read and write, on its fd (not socket.py's ``makefile``: its import)."""
        fd = conn.fileno()
        return open(fd, "rb", buffering=_BUFFER, closefd=False), open(fd, "wb", buffering=_BUFFER, closefd=False)

    def serve(self) -> None:
        try:
            while self.keep and self.one():
                pass
        except (OSError, ValueError, ConnectionError):
            pass
        finally:
            if self.unread:
                linger(self.conn, self.wfile)
            for f in (self.wfile, self.rfile):
                with suppress(OSError):
                    f.close()
            self.conn.close()

    def one(self) -> bool:
        line = self.rfile.readline(_MAX_HEADER_BYTES)
        if not line.strip():
            return False
        method, target, version = line.decode("latin-1").split()
        headers: dict[str, str] = {}
        size = 0
        while (h := self.rfile.readline(_MAX_HEADER_BYTES)) not in (b"\r\n", b"\n"):
            size += len(h)
            if not h or size > _MAX_HEADER_BYTES:
                return False
            name, _, value = h.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        self.keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        self.started = False
        with self.rt.lock:
            self.rt.busy += 1
        self.quiet = False
        try:
            self.dispatch(method, target, headers)
        finally:
            with self.rt.lock:
                self.rt.busy -= 1
                if not self.quiet:
                    self.rt.last_active = time.monotonic()
        return True

    def dispatch(self, method: str, target: str, headers: dict[str, str]) -> None:
        got = headers.get("authorization", "").encode("latin-1")
        if self.rt.gate is not None and (stopped := self.rt.gate.screen(method, target, got)) is not None:
            self.keep = stopped[0] == 200
            self.quiet = True  # a probe or a refused request keeps no session alive
            return self.json(*stopped)
        if self.rt.gate is None and not _operator._compare_digest(got, self.rt.expected):  # hmac's, without OpenSSL
            self.keep = False
            return self.json(401, {"message": "Unauthorized"})
        path, _, query = target.partition("?")
        body: Body | None = None
        try:
            body = self.body = Body(self.rfile, headers, self.rt.max_upload)
            if headers.get("expect", "").lower() == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.route(method, path, _stdlib("urllib.parse").parse_qs(query) if query else {}, headers, body)
        except HttpError as exc:
            self.fail(exc.status, exc.message)
        except (ValueError, KeyError, TypeError) as exc:
            self.fail(400, f"bad request: {exc}")
        except FileNotFoundError:
            self.fail(404, "File not found")
        except OSError as exc:
            client = isinstance(exc, NotADirectoryError | IsADirectoryError | FileExistsError) or exc.errno == 39
            self.fail(400 if client else 500, exc.strerror or str(exc))
        self.body = None

    def fail(self, status: int, message: str) -> None:
        """An error answer, unless the answer has begun (then only the connection ends)."""
        if status in (401, 413) or status >= 500 or self.started:
            self.keep = False
        if not self.started:
            self.json(status, {"message": message})

    def route(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: Body) -> None:
        head, _, rest = path.lstrip("/").partition("/")
        rel = _stdlib("urllib.parse").unquote(rest) if "%" in rest else rest
        legacy = {
            ("GET", ""): lambda: self.json(200, {"status": "ok", "message": "Sandbox Runtime is active."}),
            ("POST", "execute"): lambda: self.execute(body),
            ("POST", "upload"): lambda: self.upload(headers, body),
            ("GET", "download"): lambda: self.download(rel),
            ("GET", "list"): lambda: self.listing(rel),
            ("GET", "exists"): lambda: self.json(200, {"path": rel, "exists": os.path.lexists(self.rt.resolve(rel))}),
        }
        if (method, head) in legacy:
            return legacy[(method, head)]()
        if path.startswith(_EXT):
            return self.extension(method, path[len(_EXT) :], query, body)
        raise HttpError(404, "Not found")

    def extension(self, method: str, path: str, query: dict[str, list[str]], body: Body) -> None:
        kind, _, rest = path.partition("/")
        rel = _stdlib("urllib.parse").unquote(rest) if "%" in rest else rest
        if (method, kind) == ("POST", "commands") and not rest:
            spec = loads(body.all() or b"{}")
            cid, command = self.rt.start(spec)
            if spec.get("background"):
                start_thread(command.finish)  # its driver
                return self.json(200, {"id": cid})
            try:
                return self.stream(command, spec.get("timeout_seconds"), cid, drive=True)
            finally:
                command.finish()  # its client gone, it still runs to its end (a later wait sees it)
        if kind == "commands":
            cid, _, action = rest.partition("/")
            found = self.rt.commands.get(cid)
            if found is None:
                raise HttpError(404, f"no command {cid}")
            if method == "POST" and action == "kill":
                return self.json(200, {"killed": found.kill()})
            if method == "GET" and action == "status":  # a client that reattaches finds it so
                return self.json(200, {"id": cid, "running": not found.finished, "pty": found.tty is not None})
            if method == "POST" and action in ("stdin", "signal", "resize"):  # terminal.py: a command's controls
                return self.json(200, __import__("terminal").control(found, action, body, query))
            timeout = float(query["timeout"][0]) if "timeout" in query else None
            return self.stream(found, timeout, cid)
        if (method, kind) == ("PUT", "files"):
            return self.json(200, {"size": self.save(self.rt.resolve(rel), body, bool(query.get("mkdir")))})
        if (method, kind) == ("GET", "tar"):
            return self.tar_out(self.rt.resolve(rel))
        if (method, kind) == ("GET", "watch"):  # watch.py: a directory's events, as they come
            try:
                watch = __import__("watch")
            except ImportError:  # a pod's exec runtime ships without it
                raise HttpError(501, "this session's runtime has no directory watch") from None
            watch.serve(self, self.rt.resolve(rel), query)
            return None
        if (method, kind) == ("PUT", "tar"):
            return self.tar_in(self.rt.resolve(rel), body, bool(query.get("exact")))
        raise HttpError(404, "Not found")

    def execute(self, body: Body) -> None:
        spec = loads(body.all())
        try:
            argv, problem = _stdlib("shlex").split(str(spec["command"])), "No command provided"
        except ValueError as exc:
            argv, problem = [], f"Malformed command: {exc}"
        if not argv:
            return self.json(200, {"stdout": "", "stderr": problem, "exit_code": 1, "timed_out": False})
        _, command = self.rt.start({"argv": argv})
        out: dict[str, list[str]] = {"stdout": [], "stderr": []}
        result: dict[str, Any] = {}
        for event in command.follow(spec.get("timeout_seconds"), drive=True):
            out["stdout"].append(event.get("stdout", ""))
            out["stderr"].append(event.get("stderr", ""))
            result = event
        self.json(200, {"stdout": "".join(out["stdout"]), "stderr": "".join(out["stderr"]), **result})

    def upload(self, headers: dict[str, str], body: Body) -> None:
        ctype = headers.get("content-type", "")
        boundary = next(
            (p.split("=", 1)[1].strip('"') for p in ctype.split(";") if p.strip().startswith("boundary=")), ""
        )
        if not boundary:
            raise HttpError(400, "multipart/form-data with a boundary expected")
        parts = Multipart(body, boundary.encode("latin-1"))
        while (part := parts.next_part()) is not None:
            name, filename = part
            if name != "file" or filename is None:
                parts.skip()
                continue
            self.save(self.rt.resolve(filename), parts, True)
            parts.skip_rest()
            return self.json(200, {"message": f"File '{filename}' uploaded successfully."})
        raise HttpError(400, "no 'file' field in the form")

    def download(self, rel: str) -> None:
        path = self.rt.resolve(rel)
        if not os.path.isfile(path):
            raise HttpError(404, "File not found")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self.head(200, "application/octet-stream", length=size)
            while data := f.read(_CHUNK):
                self.wfile.write(data)
        self.wfile.flush()

    def listing(self, rel: str) -> None:
        path = self.rt.resolve(rel)
        if not os.path.isdir(path):
            raise HttpError(404, "Path is not a directory")
        entries = []
        for name in sorted(os.listdir(path)):
            with suppress(OSError):
                st = os.stat(os.path.join(path, name), follow_symlinks=False)
                kind = "directory" if stat.S_ISDIR(st.st_mode) else "file"
                entries.append({"name": name, "size": st.st_size, "type": kind, "mod_time": st.st_mtime})
        self.json(200, entries)

    def save(self, path: str, source: Any, mkdir: bool) -> int:
        """Stream ``source`` to a temp file beside ``path``, then rename: no half-written file."""
        if path == self.rt.root or os.path.isdir(path):
            raise HttpError(400, "the path names a directory")
        if mkdir:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.ironflow-upload-{_thread.get_ident()}"
        size = 0
        try:
            with open(temp, "xb") as f:
                while data := source.read(_CHUNK):
                    f.write(data)
                    size += len(data)
            os.replace(temp, path)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temp)
        return size

    def tar_out(self, path: str) -> None:
        if not os.path.isdir(path):
            raise HttpError(404, "Path is not a directory")
        tarfile, home = _stdlib("tarfile"), os.path.realpath(os.environ.get("HOME") or "/")
        self.head(200, "application/x-tar", chunked=True)
        chunks = Chunked(self.wfile)
        own = (home, "./.ironflow")  # HOME's: the runtime's own state (its token FIFO, delivered variables), kept in
        try:
            with tarfile.open(fileobj=chunks, mode="w|") as tar:
                tar.add(path, arcname=".", recursive=True, filter=lambda i: None if (path, i.name) == own else i)
        except tarfile.TarError as exc:
            raise HttpError(400, f"bad request: {exc}") from None
        chunks.end()

    def tar_in(self, path: str, body: Body, exact: bool = False) -> None:
        os.makedirs(path, exist_ok=True)
        tarfile = _stdlib("tarfile")
        filtered = hasattr(tarfile, "data_filter")  # Python 3.11.4+: Debian 12's 3.11.2 (a runner image) has none
        count, dirs, trusted = 0, [], {"filter": "fully_trusted"} if filtered else {}
        try:
            with tarfile.open(fileobj=body, mode="r|") as tar:
                for member in tar:
                    if filtered and not exact:
                        tar.extract(member, path, filter="data")  # no absolute path, no '..', no link out
                    else:
                        dirs += self.extract_checked(tar, member, path, exact, trusted)
                    count += 1
        except tarfile.TarError as exc:
            raise HttpError(400, f"bad request: {exc}") from None
        for target, mode in reversed(dirs):  # last, deepest first: a 0500 directory took its files before
            os.chmod(target, mode)
        while body.read():  # the record's padding after the end-of-archive blocks
            pass
        self.json(200, {"path": os.path.relpath(path, self.rt.root), "entries": count})

    def extract_checked(self, tar: Any, member: Any, path: str, exact: bool, trusted: Any) -> list[tuple[str, int]]:
        """Files, directories and (``exact``: a snapshot's restore) symlinks that resolve in the workspace (403 else),
        modes less setuid/setgid (not ``exact``: past 0755 neither), mtimes, no owner; directories' modes set last."""
        if not (member.isreg() or member.isdir() or (exact and member.issym())):
            raise HttpError(400, "bad request: a link or special file in the tar (symlinks need Python 3.11.4+ here)")
        target, mode = self.rt.resolve(os.path.join(path, member.name)), member.mode & (0o1777 if exact else 0o755)
        if member.issym():
            self.rt.resolve(os.path.join(os.path.dirname(target), member.linkname))
        if member.isdir():
            os.makedirs(target, exist_ok=True)
            return [(target, mode)] if target != path else []  # the destination keeps its own (a pod's HOME: root's)
        tar.extract(member, path, set_attrs=False, **trusted)  # checked above; what is there is followed, never out
        if member.isreg():
            os.chmod(target, mode)
            os.utime(target, (member.mtime, member.mtime))
        return []

    def head(self, status: int, ctype: str, *, length: int | None = None, chunked: bool = False) -> None:
        self.started = True
        if self.body is None or not self.body.done:
            self.keep = False  # an unread body: the connection cannot carry another request
            self.unread = True
        self.wfile.write(response_head(status, ctype, length=length, chunked=chunked, keep=self.keep))

    def json(self, status: int, doc: Any) -> None:
        data = dumps(doc)
        self.head(status, "application/json", length=len(data))
        self.wfile.write(data)
        self.wfile.flush()

    def stream(self, command: Command, timeout: Any, cid: str, *, drive: bool = False) -> None:
        """The command's events, flushed once per batch; ``drive``: this thread runs it."""
        self.head(200, "application/x-ndjson", chunked=True)
        chunks = Chunked(self.wfile)
        pid = None if command.proc is None else command.proc.pid  # its group's id: a relay's kill names it
        chunks.write(dumps({"id": cid, "pid": pid}) + b"\n")
        for batch in command.batches(None if timeout is None else float(timeout), drive=drive):
            for event in batch:
                chunks.write(dumps(event) + b"\n", flush=False)
            if "exit_code" not in batch[-1]:  # the last goes with the end
                self.wfile.flush()
        chunks.end()


def _stdlib(name: str) -> Any:
    """A standard module imported by the first request that needs it (tarfile, shlex, urllib.parse...), not at
    start: each import there is a slice of every session's cold open and of its idle memory."""
    __import__(name)
    return sys.modules[name]


def _watch_idle(runtime: Runtime, idle: float) -> None:
    while True:
        time.sleep(min(idle, 1.0))
        if runtime.idle_for() >= idle:
            os.kill(os.getpid(), _signal.SIGTERM)
            return


def _end_at(expires_at: float) -> None:
    while (left := expires_at - time.time()) > 0:
        time.sleep(min(left, 60.0))  # the wall clock's: a suspended host wakes past it
    os.kill(os.getpid(), _signal.SIGTERM)


def main(argv: list[str]) -> int:
    """Serve until SIGTERM, the shutdown endpoint or the idle timeout; kill every command on the way out."""
    startup = __import__("startup")  # the sibling file; pod_exec.py runs no main and never loads it
    args = startup.parse_args(argv)
    startup.open_traverse(args)  # as root, before anything drops
    # Under gVisor (--runtime-uid) its root binds the session's socket, in a directory only root enters,
    # before it sets its uids apart and drops every right; a pod's (--token-fifo) listens before its FIFO
    # can take a token (whoever delivered one connects at once); elsewhere the socket comes last.
    listener = startup.listener(args) if args.runtime_uid is not None or args.token_fifo else None
    spawn = startup.isolate(args, listener)
    if args.prewarm:
        print("ironflow-runtime: warm", file=sys.stderr, flush=True)
    runtime = Runtime(args, b"" if args.token_fifo else startup.read_token(args))
    runtime.spawn = spawn or runtime.spawn
    if args.token_fifo:  # listening (a pod's readiness probe), it takes the tokens later: delivery.py
        runtime.gate = __import__("delivery").Gate(args.token_fifo, runtime, lambda t: _watch_idle(runtime, t))
        runtime.gate.start()
    with suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    if listener is None:
        listener = startup.listener(args)

    def stop(_signum: int, _frame: Any) -> None:
        for command in list(runtime.commands.values()):
            command.kill()
        os._exit(0)

    _signal.signal(_signal.SIGTERM, stop)
    _signal.signal(_signal.SIGINT, stop)
    if args.idle_timeout > 0:
        start_thread(_watch_idle, runtime, args.idle_timeout)
    if args.expires_at is not None:  # its server may be gone by then: the session ends itself
        start_thread(_end_at, args.expires_at)
    print("ironflow-runtime: ready", file=sys.stderr, flush=True)
    while True:
        fd, _ = listener._accept()  # socket.py's accept, without its import
        start_thread(Handler(runtime, _socket.socket(fileno=fd)).serve)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
