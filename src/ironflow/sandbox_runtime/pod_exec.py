"""One request of the session runtime over stdin and stdout: a pod reached only by exec.

A Kubernetes session's pod runs no server: each request is one ``pods/exec`` of
``python3 -c <boot>`` that reads ``streams.py``, ``server.py`` and this file from its stdin
(:mod:`ironflow.k8s.sessions.wire`), then a nonce line, then one HTTP request, which
:class:`server.Handler` answers on stdout exactly as it answers on a socket: the same path
confinement, tar filter, upload limit, output cap and process-group kill. The exec channel
is the authorization (``pods/exec`` RBAC); the nonce only satisfies the handler's bearer check.

A command that keeps its stdin (``keep_stdin``, or ``pty``) lives as long as its exec, and so
does that exec's stdin: past the request, each line on it is a control of that command
(``{"action": "stdin", "data": <base64>, "eof": …}`` or ``{"action": "resize", "cols", "rows"}``),
applied by ``terminal.py`` as the socket's endpoints apply them. The process then ends with
``os._exit`` once its answer is out: the thread reading those lines may still hold stdin.

Standard library only, nothing of ironflow, like its siblings. It exits 0 whatever the
answer: the answer is in the HTTP reply, and an exec's exit status is not reliable on every
cluster (kwok reports any non-zero as an error).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import threading
from typing import Any, BinaryIO

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling files, when run by path
from server import Handler, Runtime  # type: ignore[import-not-found]
from streams import HttpError  # type: ignore[import-not-found]

__all__ = ["main"]


class _Stdio:
    """What :class:`server.Handler` asks of its connection, over this process's stdin and stdout."""

    def __init__(self, rfile: BinaryIO, wfile: BinaryIO) -> None:
        self.files = {"rb": rfile, "wb": wfile}

    def shutdown(self, _how: int) -> None:
        self.files["wb"].flush()

    def settimeout(self, _seconds: float) -> None:
        return None

    def recv(self, _size: int) -> bytes:
        return b""  # nothing left to drain: the request was sent whole

    def close(self) -> None:
        return None


class _Kept:
    """stdin for the handler, left open at its end: the controls' thread may be reading it."""

    def __init__(self, stdin: BinaryIO) -> None:
        self.read, self.readline = stdin.read, stdin.readline

    def close(self) -> None:
        return None


class _Frame:
    """One control's bytes, as :func:`terminal.control` reads a request body."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, _n: int = 0) -> bytes:
        data, self.data = self.data, b""
        return data

    def all(self, _limit: int = 0) -> bytes:
        return self.read()


def _controls(command: Any, stdin: BinaryIO) -> None:
    """Apply each control line that follows the request to its command, until stdin ends."""
    terminal = __import__("terminal")
    while line := stdin.readline(1 << 22):
        try:
            doc = json.loads(line)
            action = doc["action"]
            data = base64.b64decode(doc["data"]) if action == "stdin" else json.dumps(doc).encode()
            terminal.control(command, action, _Frame(data), {"eof": ["1"]} if doc.get("eof") else {})
        except (HttpError, ValueError, KeyError, TypeError, OSError):  # one control refused, the next may pass
            continue


class _ExecRuntime(Runtime):  # type: ignore[misc]
    """The runtime of one exec: a command that keeps its stdin gets the exec's stdin past the request."""

    def __init__(self, args: argparse.Namespace, token: bytes, stdin: BinaryIO) -> None:
        super().__init__(args, token)
        self.stdin, self.controlled = stdin, False

    def start(self, spec: dict[str, Any]) -> tuple[str, Any]:
        cid, command = super().start(spec)
        if command.keep_stdin and command.proc is not None:
            self.controlled = True
            threading.Thread(target=_controls, args=(command, self.stdin), daemon=True).start()
        return cid, command


class _ExecHandler(Handler):  # type: ignore[misc]
    """The handler of the exec's one request, which reads its body to the end even when the answer
    needed none of it (a refused path, a bad tar). An exec that ends with stdin unread may lose its
    answer on the way (the API server closes the stream); a socket's lingering close keeps it."""

    @staticmethod
    def files(conn: Any) -> tuple[BinaryIO, BinaryIO]:
        return conn.files["rb"], conn.files["wb"]

    def route(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: Any) -> None:
        try:
            super().route(method, path, query, headers, body)
        finally:
            with contextlib.suppress(HttpError, OSError, ValueError):
                while body.read():  # b"" once done
                    pass


def main(argv: list[str]) -> int:
    """Answer the one request on stdin; stdout holds the whole HTTP reply."""
    parser = argparse.ArgumentParser(prog="pod_exec.py")
    parser.add_argument("--workspace", default=".")
    parser.add_argument("--max-upload-bytes", type=int, default=1 << 30)
    parser.add_argument("--max-output-bytes", type=int, default=16 << 20)
    args = parser.parse_args(argv)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    nonce = stdin.readline().strip()
    if not nonce:
        return 0
    runtime = _ExecRuntime(args, nonce, stdin)
    _ExecHandler(runtime, _Stdio(_Kept(stdin), stdout)).serve()  # type: ignore[arg-type] # flushes and closes stdout
    if runtime.controlled:  # the controls' thread holds stdin's lock: no interpreter shutdown may wait on it
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
