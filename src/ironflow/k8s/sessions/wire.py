"""What a Kubernetes session sends through ``pods/exec`` and how its answer is read (pure).

Each request to a session's runtime is one exec of :data:`BOOT`, a few lines of Python that
read the runtime's own files from stdin (:data:`RUNTIME_FILES`, shipped whole with every
request: the pod needs ``python3`` and nothing of ironflow), then a nonce line and one HTTP
request rendered by :func:`render_request`; the runtime writes its HTTP reply on stdout,
which :class:`~ironflow.sessions.replies.ReplyParser` reads piece by piece as the exec's frames
arrive, and :class:`~ironflow.sessions.replies.LineSplitter` cuts a command's reply into its NDJSON
events (shared with the unix socket client). Never a token, a
credential or a host path in any of it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import signal
from collections.abc import Mapping, Sequence
from typing import Final

from ironflow.sessions import replies

__all__ = [
    "BOOT",
    "RUNTIME_FILES",
    "SIGNALS",
    "Control",
    "content_type_of",
    "control_frame",
    "kill_command",
    "read_control",
    "render_request",
    "runtime_command",
    "signal_number",
]

#: The runtime files the boot line loads, in order: each later one imports the earlier ones.
RUNTIME_FILES: Final = ("lite.py", "popen.py", "streams.py", "terminal.py", "server.py", "pod_exec.py")
_MODULES: Final = tuple(name.removesuffix(".py") for name in RUNTIME_FILES)
#: Loads each file from stdin as a module (sizes in argv), then runs the last one's ``main``.
BOOT: Final = (
    "import sys,types\n"
    "r=sys.stdin.buffer\n"
    f"for n,s in zip({_MODULES!r},sys.argv[1:{len(_MODULES) + 1}]):\n"
    " m=types.ModuleType(n);m.__file__='/nonexistent-ironflow-runtime/'+n+'.py';sys.modules[n]=m\n"
    " exec(compile(r.read(int(s)),m.__file__,'exec'),m.__dict__)\n"
    f"sys.exit(m.main(sys.argv[{len(_MODULES) + 1}:]))\n"
)
#: The signals a client may send by name: the runtime's own list (``terminal.py``'s ``SIGNALS``).
SIGNALS: Final = ("HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "PIPE", "ALRM", "TERM", "CONT", "STOP", "TSTP", "WINCH")
_MAX_SIDE: Final = 10000
_KILL: Final = "import os,sys\ntry:\n os.killpg(int(sys.argv[1]),int(sys.argv[2]))\nexcept OSError:\n pass\n"


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


def kill_command(pid: int, *, python: str = "python3", signal_number: int = int(signal.SIGKILL)) -> tuple[str, ...]:
    """The exec argv that signals a command's whole process group (its pid leads the group), SIGKILL unless told."""
    if pid <= 1:
        raise ValueError(f"refusing to kill process group {pid}")
    return (python, "-I", "-S", "-c", _KILL, str(pid), str(signal_number))


def signal_number(name: str) -> int:
    """The number of a signal named in :data:`SIGNALS` (``SIG`` or not, any case).

    Raises:
        ValueError: any other name (its message one line, as the runtime's 400).
    """
    short = str(name).upper().removeprefix("SIG")
    if short not in SIGNALS:
        raise ValueError(f"unknown signal {str(name)[:20]!r}: use one of {' '.join(SIGNALS)}")
    return int(getattr(signal, "SIG" + short))


@dataclasses.dataclass(frozen=True)
class Control:
    """What a control request asks: a line for the pod's runtime (and the answer to give), or a signal."""

    frame: bytes = b""
    answer: Mapping[str, object] = dataclasses.field(default_factory=dict)
    signal: int | None = None


def read_control(action: str, body: bytes, *, eof: bool, pty: bool) -> Control:
    """A ``stdin`` (raw body), ``signal`` or ``resize`` request (JSON body) of a command, checked as
    the runtime checks it.

    Raises:
        ValueError: a bad signal name, size or body; a resize of a command without a terminal.
    """
    if action == "stdin":
        frame = control_frame("stdin", data=base64.b64encode(body).decode(), eof=eof)
        return Control(frame, {"written": len(body)})
    doc = json.loads(body or b"{}")
    if not isinstance(doc, dict):
        raise ValueError("the body must be a JSON object")
    if action == "signal":
        return Control(signal=signal_number(doc.get("signal", "")))
    cols, rows = doc.get("cols", 80), doc.get("rows", 24)
    if not all(isinstance(n, int) and 0 < n <= _MAX_SIDE for n in (cols, rows)):
        raise ValueError(f"cols and rows must be whole numbers from 1 to {_MAX_SIDE}")
    if not pty:
        raise ValueError("the command has no terminal: start it with pty")
    return Control(control_frame("resize", cols=cols, rows=rows), {"cols": cols, "rows": rows})


def control_frame(action: str, **fields: object) -> bytes:
    """One line the pod's runtime reads on the exec's stdin after the request: a stdin write
    (``data``: base64, ``eof``) or a resize (``cols``, ``rows``) of the command it runs.

    >>> control_frame("resize", cols=80, rows=24)
    b'{"action": "resize", "cols": 80, "rows": 24}\\n'
    """
    return json.dumps({"action": action, **fields}).encode() + b"\n"


def render_request(nonce: str, method: str, target: str, body: bytes, *, content_type: str | None = None) -> bytes:
    """The nonce line and one ``Connection: close`` HTTP/1.1 request with its whole body.

    >>> render_request("n1", "GET", "/exists/a", b"").split(b"\\r\\n")[:2]
    [b'n1', b'GET /exists/a HTTP/1.1']
    """
    if any(c in part for part in (nonce, method, target) for c in " \r\n"):
        raise ValueError("a request part holds a space or a line break")
    headers = {"Authorization": f"Bearer {nonce}", "Content-Length": str(len(body))}
    if content_type:
        headers["Content-Type"] = content_type
    head = replies.header_lines("sandbox", None, {**headers, "Connection": "close"})
    return nonce.encode() + b"\r\n" + f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + head + b"\r\n" + body


def content_type_of(headers: Mapping[str, str]) -> str:
    """The reply's content type, JSON when it named none."""
    return headers.get("content-type", "application/json")
