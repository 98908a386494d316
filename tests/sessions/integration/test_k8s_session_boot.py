"""The boot line a Kubernetes session's exec runs, run here as a process: the runtime's own
files come on stdin, the workspace is the working directory, the reply is the runtime's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ironflow.k8s.sessions import wire
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.sessions import replies


def _bundle() -> tuple[bytes, list[int]]:
    folder = Path(SERVER_PATH).parent
    parts = [(folder / name).read_bytes() for name in wire.RUNTIME_FILES]
    return b"".join(parts), [len(p) for p in parts]


def test_the_boot_line_answers_one_request_from_stdin_in_its_working_directory() -> None:
    """What the pod runs: no file of ironflow on disk, the workspace is the working directory,
    and a path outside it is refused there (403)."""
    bundle, sizes = _bundle()
    argv = wire.runtime_command(sizes, max_upload_bytes=100, max_output_bytes=1000, python=sys.executable)
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "a.txt"), "w") as f:
            f.write("in the workspace")
        answers = []
        for target in ("/download/a.txt", "/download/..%2F..%2Fetc%2Fpasswd"):
            stdin = bundle + wire.render_request("nonce1", "GET", target, b"")
            out = subprocess.run(argv, input=stdin, capture_output=True, cwd=work, timeout=30, check=True)
            parser = replies.ReplyParser()
            answers.append((parser, b"".join(parser.feed(out.stdout))))
    assert (answers[0][0].status, answers[0][1]) == (200, b"in the workspace")
    assert answers[1][0].status == 403


def test_a_watch_over_the_exec_bridge_is_a_501_in_one_line() -> None:
    """The boot line ships no ``watch.py``: a directory's watch is refused in words, not a dropped connection."""
    bundle, sizes = _bundle()
    argv = wire.runtime_command(sizes, max_upload_bytes=100, max_output_bytes=1000, python=sys.executable)
    with tempfile.TemporaryDirectory() as work:
        stdin = bundle + wire.render_request("nonce1", "GET", "/ironflow/v1/watch/.", b"")
        out = subprocess.run(argv, input=stdin, capture_output=True, cwd=work, timeout=30, check=True)
    parser = replies.ReplyParser()
    body = b"".join(parser.feed(out.stdout))
    assert parser.status == 501
    assert body == b'{"message": "this session\'s runtime has no directory watch"}'
