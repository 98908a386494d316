"""``ironflow exec`` prints a command's output for a terminal shown, never obeyed, and gives a pipe
its exact bytes (issue 34, L7; real bubblewrap, a real pseudo-terminal)."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

#: A clipboard write (OSC 52), a screen clear (CSI 2J), on stdout and on stderr.
SCRIPT = r"printf '\033]52;c;aGk=\007\033[2Jout\n'; printf '\033[2Jerr\n' >&2"
EXEC = [sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec", "--", "sh", "-c", SCRIPT]


def _on_a_terminal() -> bytes:
    """What the command's terminal shows: stdout and stderr both on one pseudo-terminal."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(EXEC, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        os.close(slave)
        shown = bytearray()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1)[0]:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            shown += data
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(master)
    return bytes(shown)


def test_a_terminal_sees_the_escapes_shown_not_obeyed() -> None:
    shown = _on_a_terminal()
    assert b"\x1b" not in shown
    assert b"\x07" not in shown
    assert b"\\x1b]52;c;aGk=\\x07\\x1b[2Jout" in shown
    assert b"\\x1b[2Jerr" in shown


def test_a_pipe_gets_the_commands_own_bytes() -> None:
    done = subprocess.run(EXEC, capture_output=True, stdin=subprocess.DEVNULL, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout == b"\x1b]52;c;aGk=\x07\x1b[2Jout\n"
    assert done.stderr == b"\x1b[2Jerr\n"
