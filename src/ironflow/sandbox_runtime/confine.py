"""Keep a session's commands out of reach of the runtime that starts them (``server.py --isolate-commands``).

The runtime and its commands share a uid; without this, a command could copy the runtime's
listening socket (``pidfd_getfd``), stop it and answer in its place, or read the token in its
memory. So, at start, before the token is read and before any other thread:

1. a pid namespace for the commands: one thread (the spawner) calls ``unshare(CLONE_NEWPID)``
   (a bubblewrap session keeps ``CAP_SYS_ADMIN`` in its user namespace for this) and starts
   every command from then on; only that thread's children land there, since a process whose
   children go elsewhere can start no thread. A command can name no pid of the runtime
   (``kill``, ``pidfd_open``), and a pidfd of it from ``/proc`` fails across namespaces;
2. a tiny init, forked by the spawner, is pid 1 there: it holds nothing (fds 0-2 on
   ``/dev/null``, no token, no socket), reaps orphans, and dies with the runtime (taking every
   command with it);
3. every thread and the init drop every capability (ambient, inheritable, permitted,
   effective; the bounding set too as uid 0) and the process is not dumpable, so ptrace-mode
   checks (``/proc/<pid>/mem``, ``environ``, ``fd/``, ``pidfd_getfd``) refuse a command,
   which has no ``CAP_SYS_PTRACE``.

gVisor (this release) has no ``unshare(CLONE_NEWPID)``: there the runtime starts as gVisor's
root (it binds the session's socket first), with no bounding set and ``no_new_privs`` from its spec
(:func:`ironflow.local.sandbox.gvisor.oci_spec`), and sets its real and saved uid apart from its
commands' (``--runtime-uid``), which then can neither signal nor trace it; that uid change clears
its capabilities and its dumpability, and it checks that no capability is left in any set. It then
loads no libc binding at all (``_ctypes`` and libffi were 21 ms of a gVisor open); started with a
bounding set, it drops it and the rest itself, as below.

A Docker session has neither (uid 10001, every capability dropped, the daemon's seccomp profile):
with ``--commands-share-uid`` the runtime only drops what it holds and makes itself
non-dumpable, so a command (its uid, no ``CAP_SYS_PTRACE``) can read neither its memory nor its
fds; it can signal it (a session may end itself), and the host keeps the runtime's socket out
of its reach (:mod:`ironflow.local.sessions.docker_runtime`).

Each step is checked and any failure raises: the runtime then does not start (fail closed).
Linux only, standard library only (``_ctypes``, loaded where a libc call is needed), like its
siblings; imported only with the flag.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.py imports enum
import _thread
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling files, when imported by the package
from lite import start_thread  # type: ignore[import-not-found]
from popen import spawn  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    from _queue import SimpleQueue
    from collections.abc import Callable
    from typing import Any, NoReturn

__all__ = ["isolate_commands"]

_CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapAmb")


class _Libc:
    """libc's ``prctl``, ``capset`` and ``unshare``, each returning its int, the errno kept for
    :meth:`check`: called through ``_ctypes`` itself (``ctypes``' import is 3 ms and 5 modules, a
    slice of every session's cold start), as ``ctypes.CDLL(None, use_errno=True)`` calls them."""

    def __init__(self) -> None:
        c: Any = __import__("_ctypes")

        class Int(c._SimpleCData):  # type: ignore[misc]  # ctypes.c_int
            _type_ = "i"

        class Function(c.CFuncPtr):  # type: ignore[misc]
            _flags_ = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
            _restype_ = Int

        self._handle = c.dlopen(None, c.RTLD_LOCAL)  # None: the program's own
        self.get_errno: Callable[[], int] = c.get_errno
        # A function is looked up in whatever holds _handle (ctypes passes its CDLL).
        self.prctl, self.capset, self.unshare = (Function((name, self)) for name in ("prctl", "capset", "unshare"))

    def check(self, result: int, what: str) -> None:
        if result != 0:
            err = self.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")


def _held(fields: tuple[str, ...]) -> list[str]:
    """Which of these capability sets of this thread hold any capability (``/proc``: they are a thread's own)."""
    with open("/proc/thread-self/status") as f:
        return [line.split(":")[0] for line in f if line.split(":")[0] in fields and int(line.split()[1], 16)]


def _refuse_held(fields: tuple[str, ...]) -> None:
    """Raise unless none of these capability sets of this thread holds a capability."""
    if held := _held(fields):
        raise OSError(f"capabilities still held: {' '.join(held)}")


def _drop_privileges(libc: _Libc) -> None:
    """No capability in any set of this thread, no new privileges on exec, the process not dumpable."""
    libc.check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if os.geteuid() == 0:  # uid 0 in the namespace: exec could regain the bounding set
        _drop_bounding_set(libc)
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) and libc.get_errno() != errno.EINVAL:
        libc.check(-1, "clearing ambient capabilities")  # EINVAL: a kernel without them (gVisor)
    header = _CAPABILITY_VERSION_3.to_bytes(4, sys.byteorder) + bytes(4)  # version, pid 0: this thread
    libc.check(libc.capset(header, bytes(24)), "capset")  # two (effective, permitted, inheritable): all zero
    _refuse_held(_CAP_FIELDS)
    libc.check(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "non-dumpable")


def _init(libc: _Libc, report: int) -> NoReturn:
    """Pid 1 of the commands' namespace: reap whatever is left to it, until the runtime dies."""
    try:
        ok = os.getpid() == 1
        libc.check(libc.prctl(_PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0), "parent-death signal")
        _drop_privileges(libc)
        _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGCHLD})
        # The runtime reads this: had it died before the prctl, the write fails (its end is closed).
        os.write(report, b"1" if ok else b"0")
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1 << 20)  # the listening socket, the token's pipe: nothing of the runtime stays
        while ok:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                _signal.sigwait({_signal.SIGCHLD})
    finally:  # whatever happens, never back into the runtime's code
        os._exit(1)


def _enter(libc: _Libc) -> None:
    """In the spawning thread: a pid namespace for its children (its own: a process whose children go
    elsewhere can start no thread), its init, then no capability left to this thread."""
    libc.check(libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        _init(libc, write)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        got = answer.read(1)
    if got != b"1":
        os.kill(child, _signal.SIGKILL)
        raise OSError("the commands' pid namespace could not be made (its init is not pid 1)")
    _drop_privileges(libc)


def isolate_commands(
    runtime_uid: int | None = None, commands_uid: int | None = None, *, shared_uid: bool = False
) -> Callable[..., Any]:
    """Set the isolation up; call first, with no other thread started. Returns what starts a
    command (``popen.spawn``'s arguments): in the one thread whose children land in the
    commands' namespace; with ``runtime_uid``, as ``commands_uid`` instead; with ``shared_uid``
    (a Docker session), as itself, once it is non-dumpable.

    Raises:
        OSError: a step failed (the caller refuses to start).
    """
    if shared_uid:
        _drop_privileges(_Libc())
        return spawn  # type: ignore[no-any-return]
    if runtime_uid is not None:
        return _apart(runtime_uid, commands_uid)
    libc = _Libc()
    spawner = _Spawner()
    spawner.call(_enter, libc)
    _drop_privileges(libc)  # this thread's own, then the process is non-dumpable

    def in_spawner(*args: Any, **kwargs: Any) -> Any:
        return spawner.call(spawn, *args, **kwargs)

    return in_spawner


def _drop_bounding_set(libc: _Libc) -> None:
    """No capability left in the bounding set (``CAP_SETPCAP`` needed); the effective set keeps its own.
    Up to the kernel's last capability, or where it has no ``cap_last_cap`` (gVisor), to the first it
    does not know (``EINVAL``)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last: int | None = int(f.read())
    except FileNotFoundError:
        last = None
    for cap in range(64 if last is None else last + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
            continue
        if last is None and libc.get_errno() == errno.EINVAL:
            return  # past the kernel's last capability
        libc.check(-1, "dropping the bounding set")


def _apart(runtime_uid: int, uid: int | None) -> Callable[..., Any]:
    """Where no pid namespace can be made (gVisor): started as root (``CAP_SETUID`` and ``CAP_SETGID``
    among its few), with no bounding set (its spec's: else it empties it, with ``CAP_SETPCAP``), the
    runtime's real and saved uid and gid become ``runtime_uid``, the effective ones its commands'
    ``uid`` (the files it writes are theirs). A process may signal or trace another only with the
    other's real or saved uid: a command, every uid its own, can do neither to the runtime. Checked,
    then no capability is left (the uid change cleared them, and its dumpability)."""
    if uid in (None, 0, runtime_uid) or runtime_uid == 0:
        raise OSError(f"the runtime's uid {runtime_uid} must be apart from its commands' ({uid}) and root's")
    libc = _Libc() if _held(("CapBnd",)) else None  # none: its spec also set no_new_privs
    if libc is not None:
        _drop_bounding_set(libc)  # while root: past the uid change it could no longer (and exec regains nothing)
    os.setgroups([])
    os.setresgid(runtime_uid, uid, runtime_uid)
    os.setresuid(runtime_uid, uid, runtime_uid)  # root no more: the kernel clears the capabilities
    if (os.getresuid(), os.getresgid(), os.getgroups()) != ((runtime_uid, uid, runtime_uid),) * 2 + ([],):
        raise OSError(f"the runtime's uids are not apart from its commands' ({uid})")
    if libc is not None:
        _drop_privileges(libc)
    else:
        _refuse_held((*_CAP_FIELDS, "CapBnd"))

    def as_commands(*args: Any, **kwargs: Any) -> Any:
        return spawn(*args, user=uid, group=uid, **kwargs)

    return as_commands


class _Spawner:
    """One thread that runs what it is given, one call at a time, and hands back the result or
    the exception: the thread whose children land in the commands' pid namespace. (Not
    ``concurrent.futures``: its import, with logging's, is a slice of every session's cold start.)"""

    def __init__(self) -> None:
        # queue's, without its import (heapq...); loaded here: gVisor's runtime, set apart by uid, has no spawner
        simple_queue = __import__("_queue").SimpleQueue
        self._calls: SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = simple_queue()
        self._answers: SimpleQueue[tuple[bool, Any]] = simple_queue()
        self._lock = _thread.allocate_lock()
        start_thread(self._serve)

    def _serve(self) -> None:
        while True:
            fn, args, kwargs = self._calls.get()
            try:
                self._answers.put((True, fn(*args, **kwargs)))
            except BaseException as exc:  # handed back to the caller, raised there
                self._answers.put((False, exc))

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` in the spawner's thread."""
        with self._lock:
            self._calls.put((fn, args, kwargs))
            ok, value = self._answers.get()
        if not ok:
            raise value
        return value
