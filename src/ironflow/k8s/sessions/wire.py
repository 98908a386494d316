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

from ironflow.sessions import replies

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
#: The reply reader and the event splitter, shared with the unix socket client (:mod:`ironflow.sessions.replies`).
ReplyParser = replies.ReplyParser
LineSplitter = replies.LineSplitter
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


def content_type_of(headers: Mapping[str, str]) -> str:
    """The reply's content type, JSON when it named none."""
    return headers.get("content-type", "application/json")
