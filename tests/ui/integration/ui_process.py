"""``ironflow ui`` as a user starts it: a subprocess on a free port (``--port 0``), its URL read from
the line it prints, stopped with SIGTERM (and its exit code checked) when the block ends."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["IRONFLOW", "running_ui"]

IRONFLOW = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]
_URL = re.compile(r"^ironflow ui on (http://\S+?)/")


@contextmanager
def running_ui(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, start_s: float = 30.0
) -> Iterator[str]:
    """The UI's base URL (no trailing slash) while ``ironflow ui --port 0 ARGS`` runs."""
    proc = subprocess.Popen(
        [*IRONFLOW, "ui", "--port", "0", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + start_s
        line = proc.stderr.readline()  # the UI prints its URL once it listens, or exits with its error
        found = _URL.match(line)
        assert found is not None, f"ironflow ui did not start: {line}{proc.stderr.read() if proc.poll() else ''}"
        assert time.monotonic() < deadline
        yield found.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert proc.returncode == 0, err
