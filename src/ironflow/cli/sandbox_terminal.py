"""``ironflow sandbox exec -t``: the user's terminal on a command that runs in a session's pty.

The command starts in a pty of the session (``pty=True``, the user's size and ``TERM``); the
user's terminal goes raw, so every key (Ctrl-C, Ctrl-D, arrows) is the remote command's to read.
Keys go to its stdin as they are typed, its output to ours as it comes, a resize of our window
(SIGWINCH) to its pty, and its exit code is ours. The terminal's mode is restored on every way
out: the command's end, an error, or SIGTERM/SIGHUP to this process (they end the loop, not the
process); leaving before the command's end kills it, as ``exec`` without ``-t`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Mapping, Sequence
from typing import Final

from ironflow import errors
from ironflow.cli import exits
from ironflow.sessions.client import AsyncSandbox
from ironflow.sessions.commands import DEFAULT_TERMINAL, CommandHandle
from ironflow.sessions.values import Output

__all__ = ["attach", "require_terminal"]

_READ: Final = 4096


def require_terminal() -> None:
    """Exit 2 with one line unless stdin is a terminal (``-t`` has nothing to make raw)."""
    if not os.isatty(sys.stdin.fileno()):
        exits.fail("-t needs a terminal on stdin: run it from an interactive shell, or drop -t to pipe input")


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return DEFAULT_TERMINAL
    return (size.columns or DEFAULT_TERMINAL[0], size.lines or DEFAULT_TERMINAL[1])


async def _forward_keys(handle: CommandHandle, keys: asyncio.Queue[bytes]) -> None:
    """The keys typed, in order, as few writes as the typing allows; ends with the command."""
    while True:
        data = await keys.get()
        while not keys.empty():
            data += keys.get_nowait()
        try:
            await handle.send_stdin(data)
        except errors.ConfigError:  # it ended (its exit event follows) or stopped reading
            return


async def _follow_size(handle: CommandHandle, fd: int, changed: asyncio.Event) -> None:
    """Each change of our window's size, to the command's pty (the latest size only)."""
    while True:
        await changed.wait()
        changed.clear()
        with contextlib.suppress(errors.ConfigError):
            await handle.resize(*_size(fd))


async def attach(
    sandbox: AsyncSandbox,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | None,
    timeout: float | None,  # noqa: ASYNC109 - the command's own limit, enforced in the sandbox
) -> tuple[int, bool]:
    """Run ``argv`` in a pty of ``sandbox`` on the user's terminal; its exit code and whether it timed out."""
    fd, out = sys.stdin.fileno(), sys.stdout.buffer
    cols, rows = _size(fd)
    variables = {"TERM": os.environ.get("TERM") or "xterm-256color", **env}
    handle = await sandbox.commands.start(argv, env=variables, cwd=cwd, timeout=timeout, pty=True, cols=cols, rows=rows)
    loop = asyncio.get_running_loop()
    keys: asyncio.Queue[bytes] = asyncio.Queue()
    resized = asyncio.Event()
    current = asyncio.current_task()
    saved = termios.tcgetattr(fd)
    tasks: list[asyncio.Task[None]] = []
    ended, stopped = False, []

    def stop(number: int) -> None:
        stopped.append(number)
        if current is not None:
            current.cancel()

    def read_keys() -> None:
        data = os.read(fd, _READ)
        if data:
            keys.put_nowait(data)
        else:  # our terminal hung up: nothing more to type
            loop.remove_reader(fd)

    try:
        tty.setraw(fd, termios.TCSANOW)
        loop.add_reader(fd, read_keys)
        loop.add_signal_handler(signal.SIGWINCH, resized.set)
        for number in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(number, stop, number)
        tasks = [
            asyncio.create_task(_forward_keys(handle, keys)),
            asyncio.create_task(_follow_size(handle, fd, resized)),
        ]
        async for event in handle.events():
            if isinstance(event, Output):
                out.write(event.text.encode())
                out.flush()
            else:
                ended = True
                return event.exit_code, event.timed_out
        raise errors.SandboxError("the command's stream ended without its exit")
    except asyncio.CancelledError:
        if not stopped:
            raise
    finally:
        for task in tasks:
            task.cancel()
        loop.remove_reader(fd)
        for number in (signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(number)
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)
        if not ended:  # left early: the command does not outlive its terminal
            with contextlib.suppress(Exception):
                await asyncio.shield(handle.kill())
    name = signal.Signals(stopped[0]).name
    exits.fail(f"{name}: the terminal is left and the command killed", 128 + stopped[0])
