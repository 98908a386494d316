"""``ironflow sandbox exec -t`` driven through a real pty, as a user's terminal drives it: a shell
in the session answers what is typed, a resize of our window reaches it, its exit code is the
CLI's, and our terminal's mode is back as it was; without a terminal, ``-t`` is one line, exit 2."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Iterator

import pytest
from tests.sessions.integration.serving import CLI, Served, ironflow

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

WAIT_S = 30.0


class Terminal:
    """The CLI run on the slave side of a pty of ours (its controlling terminal); we are the user."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the CLI, on the pty
            try:
                os.execve(argv[0], argv, env)  # noqa: S606 - the CLI's own argv, no shell
            finally:
                os._exit(127)
        self.seen = b""

    def size(self, cols: int, rows: int) -> None:
        """Resize our window: the kernel sends SIGWINCH to the CLI."""
        import fcntl

        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def until(self, wanted: bytes) -> None:
        deadline = time.monotonic() + WAIT_S
        while wanted not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {wanted!r} in {self.seen[-2000:]!r}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:  # EIO: the CLI and every holder of its terminal ended
                    data = b""
                assert data, f"the terminal closed before {wanted!r}: {self.seen[-2000:]!r}"
                self.seen += data

    def exit_code(self) -> int:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            if select.select([self.fd], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):  # EIO: the CLI's end
                    self.seen += os.read(self.fd, 4096)
        raise AssertionError(f"the CLI did not end: {self.seen[-2000:]!r}")

    def close(self) -> None:
        try:
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.fd)


@pytest.fixture
def session(served: Served) -> Iterator[str]:
    done = ironflow("sandbox", "open", "--ttl", "5m", env=served.env)
    assert done.returncode == 0, done.stderr
    sandbox_id = done.stdout.strip()
    try:
        yield sandbox_id
    finally:
        ironflow("sandbox", "close", sandbox_id, env=served.env)


def test_exec_t_gives_an_interactive_shell_and_its_exit_code(served: Served, session: str) -> None:
    argv = [*CLI, "sandbox", "exec", "-t", session, "--", "bash", "--norc", "--noprofile", "-i"]
    terminal = Terminal(argv, {**served.env, "TERM": "xterm"})
    try:
        terminal.size(100, 30)
        terminal.until(b"$ ")
        terminal.type(b"echo h''i\r")  # the echo of what is typed is not the answer
        terminal.until(b"hi\r\n")
        terminal.type(b"stty size\r")
        terminal.until(b"30 100")
        terminal.size(120, 40)
        time.sleep(0.5)  # SIGWINCH to the CLI, its resize to the session's pty
        terminal.type(b"stty size; tty\r")
        terminal.until(b"40 120")
        terminal.until(b"/dev/pts/")
        terminal.type(b"exit 3\r")
        assert terminal.exit_code() == 3
        attrs = termios.tcgetattr(terminal.fd)
        assert attrs[3] & termios.ICANON  # our terminal is cooked again
        assert attrs[3] & termios.ECHO
    finally:
        terminal.close()


def test_a_sigterm_to_exec_t_restores_the_terminal_and_kills_the_command(served: Served, session: str) -> None:
    argv = [*CLI, "sandbox", "exec", "-t", session, "--", "sh", "-c", "echo ready; exec sleep 300"]
    terminal = Terminal(argv, {**served.env, "TERM": "xterm"})
    try:
        terminal.until(b"ready")
        raw = termios.tcgetattr(terminal.fd)
        assert not raw[3] & termios.ICANON  # raw while it runs
        os.kill(terminal.pid, signal.SIGTERM)
        assert terminal.exit_code() == 128 + signal.SIGTERM
        assert termios.tcgetattr(terminal.fd)[3] & termios.ICANON
        assert b"error: SIGTERM: the terminal is left and the command killed" in terminal.seen
    finally:
        terminal.close()
    listing = ironflow("sandbox", "exec", session, "--", "sh", "-c", "ps -eo args", env=served.env)
    assert "ps -eo args" in listing.stdout, listing  # the listing sees the session's processes
    assert "sleep 300" not in listing.stdout, listing.stdout


def test_exec_t_without_a_terminal_is_one_line_and_exit_2(served: Served, session: str) -> None:
    argv = [*CLI, "sandbox", "exec", "-t", session, "--", "bash"]
    done = subprocess.run(argv, env=served.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: -t needs a terminal on stdin: run it from an interactive shell, or drop -t to pipe input"
    ]
