"""A running command's controls in the session runtime: its terminal, stdin writes, signals, resize.

Standard library only and nothing of ironflow, like its siblings; ``server.py`` imports it on the
first request that asks for a terminal or a control (a command with neither never loads it).
A terminal is a pty the command gets as stdin, stdout and stderr and as its controlling terminal
(a session leader of its own, so ``\\x03`` interrupts its foreground job and a resize sends it
SIGWINCH); its output is one stream, ``stdout``. The endpoints (``POST
/ironflow/v1/commands/<id>/stdin|signal|resize``) are behind the server's token check like the
rest; a write is bounded (:data:`MAX_STDIN_BYTES` waiting at most), a signal is named from
:data:`SIGNALS` only (400 otherwise), and a command that ended takes none of them (409).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import termios

from streams import HttpError  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MAX_STDIN_BYTES", "SIGNALS", "control", "open_pty", "resize", "signal_number", "terminal_size"]

#: The most stdin bytes a command holds unread; a write past it waits for the command to read.
MAX_STDIN_BYTES = 1 << 20
#: How long a write waits for room before it is refused (the command does not read its stdin).
STDIN_WAIT_S = 30.0
#: The signals a client may send, by name (``SIGTERM`` or ``TERM``).
SIGNALS = ("HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "PIPE", "ALRM", "TERM", "CONT", "STOP", "TSTP", "WINCH")
_MAX_SIDE = 10000


def signal_number(name: object) -> int:
    """The number of a signal named in :data:`SIGNALS`; 400 for any other name."""
    short = str(name).upper().removeprefix("SIG")
    if short not in SIGNALS:
        raise HttpError(400, f"unknown signal {str(name)[:20]!r}: use one of {' '.join(SIGNALS)}")
    return int(getattr(signal, "SIG" + short))


def terminal_size(doc: Any) -> tuple[int, int]:
    """``cols`` and ``rows`` of a request (80x24 when absent); 400 unless each is 1 to 10000."""
    cols, rows = doc.get("cols", 80), doc.get("rows", 24)
    if not all(isinstance(n, int) and 0 < n <= _MAX_SIDE for n in (cols, rows)):
        raise HttpError(400, f"cols and rows must be whole numbers from 1 to {_MAX_SIDE}")
    return cols, rows


def resize(fd: int, cols: int, rows: int) -> None:
    """Set a terminal's size: the kernel sends SIGWINCH to its foreground process group."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal() -> None:
    """In the child, after ``setsid``: its stdin (the pty) becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def open_pty(cols: int, rows: int) -> tuple[int, int, dict[str, Any]]:
    """A new pty of that size: the master, the slave, and the spawn arguments that give the child
    the slave as stdin, stdout, stderr and controlling terminal (``start_new_session`` too)."""
    master, slave = os.openpty()  # both O_NOCTTY: the runtime never takes the terminal itself
    resize(master, cols, rows)
    return master, slave, {"stdin": slave, "stdout": slave, "stderr": slave, "preexec_fn": _take_terminal}


def control(command: Any, action: str, body: Any, query: dict[str, list[str]]) -> dict[str, Any]:
    """One control request on a running command: ``stdin`` (the body's bytes as they come; ``?eof=1``
    closes it after), ``signal`` (``{"signal": "TERM"}``) or ``resize`` (``{"cols": …, "rows": …}``)."""
    if action == "stdin":
        written = command.write_stdin(b"", MAX_STDIN_BYTES, STDIN_WAIT_S)  # 409 before any byte is read
        while data := body.read():
            command.write_stdin(data, MAX_STDIN_BYTES, STDIN_WAIT_S)
            written += len(data)
        if query.get("eof", [""])[0] in ("1", "true"):
            command.write_stdin(b"", MAX_STDIN_BYTES, STDIN_WAIT_S, eof=True)
        return {"written": written}
    doc = json.loads(body.all(65536) or b"{}")
    if not isinstance(doc, dict):
        raise HttpError(400, "the body must be a JSON object")
    if action == "signal":
        number = signal_number(doc.get("signal", ""))
        if command.proc is None or command.code is not None:
            return {"sent": False}  # ended: its group may be another's now
        try:
            os.killpg(command.proc.pid, number)
        except OSError:
            return {"sent": False}
        return {"sent": True}
    cols, rows = terminal_size(doc)
    with command.inlock:  # the driver closes the master under it: never a closed (or reused) fd here
        if command.tty is None:
            raise HttpError(400, "the command has no terminal: start it with pty")
        if command.master < 0:
            raise HttpError(409, "the command has ended")
        resize(command.master, cols, rows)
    return {"cols": cols, "rows": rows}
