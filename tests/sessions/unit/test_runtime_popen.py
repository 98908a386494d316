"""The runtime starts a command without ``subprocess`` (``popen.py``), as ``subprocess.Popen`` would:
the same pipes, cwd, environment, session and errors, and no fd left behind, even when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.sessions.unit.runtime_files import runtime_module


@pytest.fixture(params=["fork_exec", "popen"])
def popen(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The module, on this Python's fork_exec and as another Python has it (``subprocess.Popen``)."""
    with runtime_module("popen") as module:
        if request.param == "popen":
            monkeypatch.setattr(module, "_fork_exec", None)
        else:
            assert module._fork_exec is not None, "this Python's fork_exec goes unused"
        yield module


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _ended(proc: Any) -> int:
    deadline = time.monotonic() + 30
    while (code := proc.poll()) is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return int(code)


def test_a_command_gets_its_stdin_cwd_and_environment_and_its_output_comes_back(
    popen: ModuleType, tmp_path: Path
) -> None:
    before = _fds()
    proc = popen.spawn(
        ["sh", "-c", 'read line; echo "$line $FOO $(pwd)"; echo err >&2; exit 3'],
        cwd=str(tmp_path),
        env={"PATH": os.environ["PATH"], "FOO": "bar"},
        stdin=popen.PIPE,
        stdout=popen.PIPE,
        stderr=popen.PIPE,
    )
    proc.stdin.write(b"hello\n")
    proc.stdin.close()
    assert proc.stdout.read() == f"hello bar {tmp_path}\n".encode()
    assert proc.stderr.read() == b"err\n"
    assert _ended(proc) == 3
    proc.stdout.close()
    proc.stderr.close()
    assert _fds() == before


def test_a_new_session_and_devnull_and_a_death_by_signal(popen: ModuleType) -> None:
    proc = popen.spawn(
        [sys.executable, "-c", "import os, sys; print(os.getsid(0), sys.stdin.read() == ''); os.kill(os.getpid(), 9)"],
        cwd=None,
        env=dict(os.environ),
        stdout=popen.PIPE,
        start_new_session=True,
    )
    assert proc.stdout.read().split() == [str(proc.pid).encode(), b"True"]
    proc.stdout.close()
    assert _ended(proc) == -9


def test_the_child_keeps_no_fd_of_the_parent(popen: ModuleType) -> None:
    read, write = os.pipe()
    os.set_inheritable(write, True)  # even an inheritable one: close_fds
    try:
        proc = popen.spawn(["ls", "/proc/self/fd"], cwd=None, env=dict(os.environ), stdout=popen.PIPE)
        listed = sorted(int(fd) for fd in proc.stdout.read().split())
        proc.stdout.close()
        _ended(proc)
    finally:
        os.close(read)
        os.close(write)
    assert listed[:3] == [0, 1, 2]
    assert len(listed) == 4  # and ls's own, of the directory it lists


@pytest.mark.parametrize(
    ("argv", "cwd", "error", "names"),
    [
        (["no-such-program-here"], None, FileNotFoundError, "no-such-program-here"),
        (["/no/such/path/prog"], None, FileNotFoundError, "/no/such/path/prog"),
        (["true"], "/no/such/dir", FileNotFoundError, "/no/such/dir"),
        (["/etc"], None, PermissionError, "/etc"),  # a directory: EACCES, even as root
    ],
)
def test_a_command_that_cannot_start_raises_its_errno_and_leaves_no_fd(
    popen: ModuleType, argv: list[str], cwd: str | None, error: type[OSError], names: str
) -> None:
    before = _fds()
    with pytest.raises(error) as caught:
        popen.spawn(argv, cwd=cwd, env=dict(os.environ), stdin=popen.PIPE, stdout=popen.PIPE)
    assert caught.value.filename == names
    assert caught.value.strerror
    with pytest.raises(error):
        subprocess.Popen(argv, cwd=cwd, env=dict(os.environ))  # as Popen does
    assert _fds() == before


def test_a_variable_named_with_an_equals_sign_is_refused(popen: ModuleType) -> None:
    before = _fds()
    with pytest.raises(ValueError, match="illegal environment variable name"):
        popen.spawn(["true"], cwd=None, env={"A=B": "1"}, stdout=popen.PIPE)
    assert _fds() == before


def test_the_path_searched_is_the_commands_own(popen: ModuleType, tmp_path: Path) -> None:
    tool = tmp_path / "only-here"
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(0o755)
    proc = popen.spawn(["only-here"], cwd=None, env={"PATH": f"/nonexistent:{tmp_path}"}, stdout=popen.PIPE)
    assert proc.stdout.read() == b"found\n"
    proc.stdout.close()
    assert _ended(proc) == 0
