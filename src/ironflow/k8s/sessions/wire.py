"""What a Kubernetes session sends through ``pods/exec`` and how its answer is read (pure).

Each request to a session's runtime is one exec of :data:`BOOT`, a few lines of Python that
read the runtime's own files from stdin (:data:`RUNTIME_FILES`, shipped whole with every
request: the pod needs ``python3`` and nothing of ironflow), then a nonce line and one HTTP
request rendered by :func:`render_request`; the runtime writes its HTTP reply on stdout,
which :class:`ReplyParser` reads piece by piece as the exec's frames arrive, and
:class:`LineSplitter` cuts a command's reply into its NDJSON events. Never a token, a
credential or a host path in any of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

__all__ = [
    "BOOT",
    "RUNTIME_FILES",
    "LineSplitter",
    "ReplyParser",
    "content_type_of",
    "kill_command",
    "render_request",
    "runtime_command",
]

#: The runtime files the boot line loads, in order: each later one imports the earlier ones.
RUNTIME_FILES: Final = ("streams.py", "server.py", "pod_exec.py")
#: Loads each file from stdin as a module (sizes in argv), then runs the last one's ``main``.
BOOT: Final = (
    "import sys,types\n"
    "r=sys.stdin.buffer\n"
    "for n,s in zip(('streams','server','pod_exec'),sys.argv[1:4]):\n"
    " m=types.ModuleType(n);m.__file__='/nonexistent-ironflow-runtime/'+n+'.py';sys.modules[n]=m\n"
    " exec(compile(r.read(int(s)),m.__file__,'exec'),m.__dict__)\n"
    "sys.exit(m.main(sys.argv[4:]))\n"
)
_KILL: Final = "import os,signal,sys\ntry:\n os.killpg(int(sys.argv[1]),signal.SIGKILL)\nexcept OSError:\n pass\n"


def runtime_command(
    sizes: Sequence[int],
    *,
    max_upload_bytes: int,
    max_output_bytes: int,
    python: str = "python3",
    workspace: str = ".",
) -> tuple[str, ...]:
    """The exec argv of one runtime request; the workspace is the exec's working directory
    unless a session's git workspace is given."""
    if len(sizes) != len(RUNTIME_FILES):
        raise ValueError(f"expected {len(RUNTIME_FILES)} file sizes, got {len(sizes)}")
    limits = ("--max-upload-bytes", str(max_upload_bytes), "--max-output-bytes", str(max_output_bytes))
    return (python, "-I", "-S", "-c", BOOT, *(str(n) for n in sizes), "--workspace", workspace, *limits)


def kill_command(pid: int, *, python: str = "python3") -> tuple[str, ...]:
    """The exec argv that kills a command's whole process group (its pid leads the group)."""
    if pid <= 1:
        raise ValueError(f"refusing to kill process group {pid}")
    return (python, "-I", "-S", "-c", _KILL, str(pid))


def render_request(nonce: str, method: str, target: str, body: bytes, *, content_type: str | None = None) -> bytes:
    """The nonce line and one ``Connection: close`` HTTP/1.1 request with its whole body.

    >>> render_request("n1", "GET", "/exists/a", b"").split(b"\\r\\n")[:2]
    [b'n1', b'GET /exists/a HTTP/1.1']
    """
    if any(c in part for part in (nonce, method, target) for c in " \r\n") or any(
        c in (content_type or "") for c in "\r\n"
    ):
        raise ValueError("a request part holds a space or a line break")
    head = [method, target, "HTTP/1.1"]
    lines = [" ".join(head), "Host: sandbox", f"Authorization: Bearer {nonce}", f"Content-Length: {len(body)}"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    lines.append("Connection: close")
    return nonce.encode() + b"\r\n" + ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ReplyParser:
    """An HTTP/1.1 reply, fed as it arrives: ``status`` and ``headers`` once the head is in,
    then each :meth:`feed` returns the body's next pieces (Content-Length or chunked);
    ``done`` once the body ended."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.done = False
        self._buf = b""
        self._left = 0
        self._chunked = False
        self._state = "head"

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while not self.done and self._step(out):
            pass
        return [piece for piece in out if piece]

    def _step(self, out: list[bytes]) -> bool:
        """One step of the reply's grammar; False when it needs more bytes."""
        if self._state == "head":
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            self._head(self._buf[:end].decode("latin-1"))
            self._buf = self._buf[end + 4 :]
            return True
        if self._state == "size":
            end = self._buf.find(b"\r\n")
            if end < 0:
                return False
            self._left = int(self._buf[:end].split(b";")[0].strip() or b"0", 16)
            self._buf = self._buf[end + 2 :]
            self._state = "data" if self._left else "trailer"
            return True
        if self._state == "trailer":
            end = self._buf.find(b"\r\n")
            if end < 0:
                return False
            self.done = end == 0
            self._buf = self._buf[end + 2 :]
            return True
        if self._state == "crlf":
            if len(self._buf) < 2:
                return False
            self._buf, self._state = self._buf[2:], "size"
            return True
        piece, self._buf = self._buf[: self._left], self._buf[self._left :]
        self._left -= len(piece)
        out.append(piece)
        if self._left == 0:
            if self._chunked:
                self._state = "crlf"
            else:
                self.done = True
        return bool(self._buf) and not self.done

    def _head(self, text: str) -> None:
        status_line, *header_lines = text.split("\r\n")
        self.status = int(status_line.split()[1])
        for line in header_lines:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        if self._chunked:
            self._state = "size"
        else:
            self._left = int(self.headers.get("content-length") or 0)
            self._state = "data"
            self.done = self._left == 0


class LineSplitter:
    """Whole lines out of pieces that cut them anywhere (a command reply's NDJSON events)."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        *lines, self._buf = self._buf.split(b"\n")
        return [line for line in lines if line.strip()]


def content_type_of(headers: Mapping[str, str]) -> str:
    """The reply's content type, JSON when it named none."""
    return headers.get("content-type", "application/json")
