"""A runtime that listens before it has a token, and takes its tokens through a FIFO (``--token-fifo``).

A Kubernetes session pod runs the runtime as its main process, so it must answer the kubelet's
readiness probe before anyone could give it a token, and its pod spec (an API object anyone
with ``pods/get`` reads) must never hold one. So the runtime makes a FIFO (mode 0600, in a
0700 directory of its HOME) and listens at once; each holder of the session (the process that
opened it, each one that reattached) writes one JSON line into the FIFO through one
``pods/exec``: ``{"token": ..., "workspace": ..., "max_upload_bytes": ..., "idle_timeout": ...}``.
Every token so written is admitted (the last :data:`MAX_TOKENS`), so a second process never has
to learn the first one's. The first line also names the workspace (a git clone made after the
start), the upload limit and the idle timeout.

Rule table of :meth:`Gate.screen` (the runtime answers the request itself otherwise):

===========================================  ===================================================
request                                      answer
===========================================  ===================================================
``GET /`` with no ``Authorization`` header   200 ``{"status": "ok"}``: the probe, saying nothing
anything else before the first token         503 (the runtime waits for its token)
a bearer that is not one of the tokens       401
===========================================  ===================================================

The FIFO is the pod's own: what runs in the sandbox could write a token of its choosing too,
which gives it nothing its commands lack (they run as the runtime's uid in the runtime's pod);
from outside, only ``pods/exec`` reaches it. The FIFO is held open for writing by the runtime
itself, so a writer never finds it without a reader while the runtime lives, and it is empty on
disk. Standard library only, nothing of ironflow, like its siblings.
"""

from __future__ import annotations

import _operator
import contextlib
import json
import os
import sys
import threading

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["MAX_TOKENS", "Gate"]

#: How many holders' tokens are admitted at once (the oldest goes first).
MAX_TOKENS = 32
_MAX_LINE = 4096  # one write up to PIPE_BUF is atomic: two holders' lines never interleave


class Gate:
    """The tokens of a runtime that started without one, and the FIFO they arrive by.

    Args:
        runtime: the server's ``Runtime``, whose ``root`` the first line's workspace sets.
        watch_idle: started in a thread with the idle timeout a line names (once).
    """

    def __init__(self, path: str, runtime: Any, watch_idle: Callable[[float], None]) -> None:
        self.path, self.rt, self.watch_idle = path, runtime, watch_idle
        self.tokens: list[bytes] = []
        self.lock = threading.Lock()
        self.idle_watched = False
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.mkfifo(path, 0o600)
        # Read and write: never EOF between two writers, and a writer always finds a reader.
        self.fd = os.open(path, os.O_RDWR)

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        pending = b""
        while data := os.read(self.fd, _MAX_LINE):
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                self.take(line)
            pending = pending[-_MAX_LINE:]

    def take(self, line: bytes) -> None:
        """Admit the token of one line; a bad line is said on stderr (never its content) and dropped."""
        try:
            doc = json.loads(line)
            token, workspace, idle = doc["token"], doc.get("workspace"), doc.get("idle_timeout")
            if not isinstance(token, str) or not token or not isinstance(workspace, str | None):
                raise TypeError("token and workspace must be strings")
            idle = None if idle is None else float(idle)
            upload = doc.get("max_upload_bytes")
            upload = None if upload is None else int(upload)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"ironflow-runtime: a bad token line: {type(exc).__name__}", file=sys.stderr, flush=True)
            return
        with self.lock:
            if not self.tokens:  # the session's own settings: from its opener, never a later holder
                if workspace:
                    self.rt.root = os.path.realpath(os.path.join(self.rt.root, workspace))
                if upload is not None and upload > 0:
                    self.rt.max_upload = upload
            self.tokens = [*self.tokens, b"Bearer " + token.encode()][-MAX_TOKENS:]
            watch = idle is not None and idle > 0 and not self.idle_watched
            self.idle_watched = self.idle_watched or watch
        if watch:
            threading.Thread(target=self.watch_idle, args=(idle,), daemon=True).start()

    def screen(self, method: str, target: str, got: bytes) -> tuple[int, dict[str, str]] | None:
        """The answer of a request the gate stops (see the rule table); None lets it through."""
        if not got and method == "GET" and target == "/":
            return 200, {"status": "ok"}
        with self.lock:
            tokens = self.tokens
        if not tokens:
            return 503, {"message": "The sandbox runtime has no token yet"}
        admitted = False
        for token in tokens:  # each compared whole, in constant time (hmac's own, without OpenSSL)
            admitted = _operator._compare_digest(got, token) or admitted
        return None if admitted else (401, {"message": "Unauthorized"})
