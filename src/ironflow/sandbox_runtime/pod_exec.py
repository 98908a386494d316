"""One request of the session runtime over stdin and stdout: a pod reached only by exec.

A Kubernetes session's pod runs no server: each request is one ``pods/exec`` of
``python3 -c <boot>`` that reads ``streams.py``, ``server.py`` and this file from its stdin
(:mod:`ironflow.k8s.sessions.wire`), then a nonce line, then one HTTP request, which
:class:`server.Handler` answers on stdout exactly as it answers on a socket: the same path
confinement, tar filter, upload limit, output cap and process-group kill. The exec channel
is the authorization (``pods/exec`` RBAC); the nonce only satisfies the handler's bearer check.

Standard library only, nothing of ironflow, like its siblings. It exits 0 whatever the
answer: the answer is in the HTTP reply, and an exec's exit status is not reliable on every
cluster (kwok reports any non-zero as an error).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import BinaryIO

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling files, when run by path
from server import Handler, Runtime  # type: ignore[import-not-found]

__all__ = ["main"]


class _Stdio:
    """What :class:`server.Handler` asks of its connection, over this process's stdin and stdout."""

    def __init__(self, rfile: BinaryIO, wfile: BinaryIO) -> None:
        self.files = {"rb": rfile, "wb": wfile}

    def makefile(self, mode: str) -> BinaryIO:
        return self.files[mode]

    def shutdown(self, _how: int) -> None:
        self.files["wb"].flush()

    def settimeout(self, _seconds: float) -> None:
        return None

    def recv(self, _size: int) -> bytes:
        return b""  # nothing left to drain: the request was sent whole

    def close(self) -> None:
        return None


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
    Handler(Runtime(args, nonce), _Stdio(stdin, stdout)).serve()  # flushes and closes stdout
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
