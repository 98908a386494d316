"""A gate's content reaches bubblewrap whole, written at once when the pipe takes it all (no thread
to start: most gates) and from a thread, after what the pipe took, when it would wait."""

from __future__ import annotations

import os
import threading

from ironflow.local.sandbox import spawn


def _read_all(fd: int, into: list[bytes]) -> None:
    while chunk := os.read(fd, 1 << 16):
        into.append(chunk)


def test_a_small_gate_is_written_whole_and_closed_at_once() -> None:
    gate = spawn.Gate(b"--unshare-all\0" * 10)
    reader = os.dup(gate.read_fd)
    try:
        assert gate.release_now()
        assert gate.read_fd == -1  # closed: this process holds no end of it
        got: list[bytes] = []
        _read_all(reader, got)
        assert b"".join(got) == b"--unshare-all\0" * 10
    finally:
        os.close(reader)


def test_a_gate_larger_than_the_pipe_is_finished_by_release_with_nothing_lost_or_twice() -> None:
    content = bytes(range(256)) * 1024  # 256 KiB: past a pipe's 64 KiB
    gate = spawn.Gate(content)
    reader = os.dup(gate.read_fd)
    try:
        assert not gate.release_now()  # the pipe is full: the rest waits for a reader
        got: list[bytes] = []
        thread = threading.Thread(target=_read_all, args=(reader, got))
        thread.start()
        gate.release()  # blocking, as a thread's: the reader drains it
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert b"".join(got) == content
    finally:
        os.close(reader)
