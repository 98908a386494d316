"""Start a session's command without ``subprocess`` (its import is 40 modules: see ``lite.py``).

:func:`spawn` takes the few of ``subprocess.Popen``'s arguments the runtime gives, and calls
the same C function as ``Popen`` does (``_posixsubprocess.fork_exec``: vfork where it can, every
other fd closed, signals restored), whose arguments are those of Python 3.11 to 3.13. On another
Python it is ``subprocess.Popen`` itself. Standard library only, nothing of ironflow, like its
siblings.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, BinaryIO

__all__ = ["DEVNULL", "PIPE", "Process", "spawn"]

#: ``subprocess``'s values, so that either starts the command from the same arguments.
PIPE, DEVNULL = -1, -3
_fork_exec: Any = None
if (3, 11) <= sys.version_info[:2] <= (3, 13):
    from _posixsubprocess import fork_exec as _fork_exec
_MAX_ERROR_BYTES = 50000


class Process:
    """A started command: ``pid``, the parent's ends of its pipes (or None), :meth:`poll`."""

    def __init__(self, pid: int, stdin: BinaryIO | None, stdout: BinaryIO | None, stderr: BinaryIO | None) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once it ended (minus the signal that ended it), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: as Popen, a code of 0
                pid, status = self.pid, 0
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def spawn(
    argv: list[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    stdin: int = DEVNULL,
    stdout: int = DEVNULL,
    stderr: int = DEVNULL,
    start_new_session: bool = False,
    preexec_fn: Callable[[], object] | None = None,
    user: int | None = None,
    group: int | None = None,
) -> Any:
    """``subprocess.Popen(argv, ...)`` of these arguments: each stream ``PIPE``, ``DEVNULL`` or an fd.

    Raises:
        OSError: the command could not start (FileNotFoundError, PermissionError...: its errno).
        ValueError: a variable's name holds ``=``, or an argument a NUL.
    """
    if _fork_exec is None:
        return __import__("subprocess").Popen(
            argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, start_new_session=start_new_session,
            preexec_fn=preexec_fn, user=user, group=group,
        )  # fmt: skip
    executable = os.fsencode(argv[0])
    if os.path.dirname(executable):
        executables: tuple[bytes, ...] = (executable,)
    else:
        executables = tuple(os.path.join(os.fsencode(d), executable) for d in os.get_exec_path(env))
    variables = []
    for key, value in env.items():
        name = os.fsencode(key)
        if b"=" in name:
            raise ValueError("illegal environment variable name")
        variables.append(name + b"=" + os.fsencode(value))
    mine: list[int] = []  # the child's ends (and /dev/null): closed here once it started
    parents: list[int] = []
    try:
        p2cread, p2cwrite = _ends(stdin, mine, parents, child_reads=True)
        c2pread, c2pwrite = _ends(stdout, mine, parents, child_reads=False)
        errread, errwrite = _ends(stderr, mine, parents, child_reads=False)
        report_read, report_write = os.pipe()
        mine.append(report_write)
        try:
            pid = _fork_exec(
                argv, executables, True, (report_write,), cwd, variables,
                p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, report_read, report_write,
                True, start_new_session, -1, group, None, user, -1, preexec_fn, True,
            )  # fmt: skip
        finally:
            for fd in mine:
                os.close(fd)
            mine.clear()
            report = _read_report(report_read)
    except BaseException:
        for fd in mine + parents:
            os.close(fd)
        raise
    if report:
        for fd in parents:
            os.close(fd)
        try:  # noqa: SIM105 - contextlib's import is 18 modules
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        raise _child_error(report, argv[0], cwd)
    return Process(
        pid,
        None if p2cwrite < 0 else open(p2cwrite, "wb", buffering=0),
        None if c2pread < 0 else open(c2pread, "rb", buffering=0),
        None if errread < 0 else open(errread, "rb", buffering=0),
    )


def _ends(spec: int, mine: list[int], parents: list[int], *, child_reads: bool) -> tuple[int, int]:
    """The read end and the write end of one stream, as fork_exec takes them (-1 for the parent's
    when it has none); the child's end goes to ``mine``, the parent's to ``parents``."""
    if spec == PIPE:
        read, write = os.pipe()
        mine.append(read if child_reads else write)
        parents.append(write if child_reads else read)
        return read, write
    if spec == DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        mine.append(fd)
        return (fd, -1) if child_reads else (-1, fd)
    return (spec, -1) if child_reads else (-1, spec)  # an fd of the caller's (a pty's slave)


def _read_report(fd: int) -> bytes:
    """What the child wrote before its exec failed; nothing once the exec closed the pipe."""
    try:
        data = b""
        while part := os.read(fd, _MAX_ERROR_BYTES):
            data += part
            if len(data) > _MAX_ERROR_BYTES:
                break
        return data
    finally:
        os.close(fd)


def _child_error(report: bytes, program: str, cwd: str | None) -> OSError:
    """The OSError the child reported (``OSError:<hex errno>:<noexec when chdir failed>``)."""
    kind, _, rest = report.partition(b":")
    number, _, where = rest.partition(b":")
    if kind == b"OSError" and number:
        code = int(number, 16)
        return OSError(code, os.strerror(code), cwd if where == b"noexec" else program)
    return OSError(f"{program}: {rest.partition(b':')[2].decode(errors='replace') or kind.decode(errors='replace')}")
