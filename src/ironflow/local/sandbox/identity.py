"""On a root worker, bubblewrap runs as a non-root host uid that still reaches what it binds.

Why: bubblewrap started by root maps the sandbox's uid to host root, so every root-only
file the sandbox can see (``/sys/firmware/acpi/tables/DSDT``, a 0600 key in a mounted
directory) is readable to it. So the sandbox's first process drops to
:data:`DEFAULT_HOST_UID` (the pod's uid) before it executes bubblewrap, and the sandbox's
uid maps to that host uid: host files are judged as that uid's, as on a Kubernetes node.

The catch is what bubblewrap must bind: the Claude CLI and Python may live under a 0700
``/root``, the run's temp dir (proxy socket, settings) may sit under a 0700 ``temp_dir``. Each
bind source is therefore *staged*: the same first process, still root, opens every source,
enters a private mount namespace (the host's mount table is never touched), covers ``/tmp``
there with a small tmpfs and binds each source at ``/tmp/<i>``; bubblewrap, as the host uid,
binds from there. What a staged directory holds is still judged by mode against that uid.

:func:`stage_plan` is pure; :func:`bind_staged` runs in the child between fork and exec, as does
:func:`die_with` (a first process that dies with the worker: ``runsc``), the one thing here a
worker that is not root runs too.
"""

from __future__ import annotations

import errno
import os
import posixpath
import signal
import stat
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ironflow import errors
from ironflow.claude import layout

__all__ = [
    "DEFAULT_HOST_UID",
    "STAGE_ROOT",
    "bind_staged",
    "binds",
    "check_conversations_dir",
    "check_host_uid",
    "die_with",
    "load_libc",
    "stage_plan",
]

#: The host uid a root worker's bubblewrap sandbox runs as: the pod's uid, which should own nothing.
DEFAULT_HOST_UID: Final = layout.SANDBOX_UID
#: Where the first process's private mount namespace shows the staged sources (hidden from the sandbox).
STAGE_ROOT: Final = "/tmp"
_CLONE_NEWNS: Final = 0x00020000
_MS_BIND: Final = 4096
_MS_REC: Final = 16384
_MS_PRIVATE: Final = 1 << 18
_PR_SET_PDEATHSIG: Final = 1
#: libc's ``mount``/``unshare`` and ctypes' ``get_errno``, loaded by :func:`load_libc` before the fork
#: (nothing is imported between fork and exec; ctypes costs milliseconds at every start that needs none).
_libc: Any = None
_get_errno: Any = None


def load_libc() -> None:
    """Load what :func:`bind_staged` and :func:`die_with` call; in the parent, before the fork that runs them."""
    global _libc, _get_errno
    if _libc is None:
        import ctypes

        _libc, _get_errno = ctypes.CDLL(None, use_errno=True), ctypes.get_errno


def check_host_uid(uid: int) -> None:
    """Refuse a host uid that would give the sandbox root's files again.

    Raises:
        ConfigError: ``uid`` is not a positive whole number.
    """
    if isinstance(uid, bool) or not isinstance(uid, int) or uid <= 0:
        raise errors.ConfigError(f"sandbox_host_uid must be a non-root uid (a positive whole number), got {uid!r}")


def check_conversations_dir(path: str, *, bubblewrap: bool, host_uid: int | None) -> None:
    """Refuse a conversations directory (``~/.claude/projects``, bound read-write) the sandbox
    cannot use: gVisor has none, and on a root worker the host uid must own it.

    Raises:
        ConfigError: naming the setting and what to do.
    """
    if not bubblewrap:
        raise errors.ConfigError("conversations_dir needs isolation='bwrap': it is not built for gVisor")
    if host_uid is not None and os.stat(path).st_uid != host_uid:
        raise errors.ConfigError(
            f"conversations_dir '{path}' must be owned by the sandbox's host uid on a root worker: "
            f"chown {host_uid} '{path}'"
        )


def stage_plan(sources: Iterable[str]) -> dict[str, str]:
    """Each distinct host source -> where bubblewrap finds it (``/tmp/<i>``), in first-seen order."""
    plan: dict[str, str] = {}
    for source in sources:
        if source not in plan:
            plan[source] = posixpath.join(STAGE_ROOT, str(len(plan)))
    return plan


def binds(plan: Mapping[str, str]) -> tuple[tuple[bytes, bytes], ...]:
    """The plan as :func:`bind_staged` takes it (bytes: nothing to encode after fork)."""
    return tuple((os.fsencode(source), os.fsencode(staged)) for source, staged in plan.items())


def _mount(source: bytes | None, target: bytes, flags: int) -> None:
    if _libc.mount(source, target, None, flags, None) != 0:
        err = _get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(target))


def die_with(parent: int) -> None:
    """In the sandbox's first process, last (a uid change clears it): SIGKILL once ``parent`` dies;
    refused (OSError) when it already has (then no signal would come). After :func:`load_libc`."""
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        err = _get_errno()
        raise OSError(err, os.strerror(err), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise OSError(errno.ESRCH, "its parent is gone")


def bind_staged(staged: tuple[tuple[bytes, bytes], ...]) -> None:
    """In the sandbox's first process (root, before it drops its uid): open each source, take a
    private mount namespace, cover ``/tmp`` and bind each source at its staged path. Takes no lock
    and logs nothing (called after fork, once :func:`load_libc` ran before it)."""
    if _libc.unshare(_CLONE_NEWNS) != 0:
        err = _get_errno()
        raise OSError(err, os.strerror(err), "unshare(CLONE_NEWNS)")
    _mount(b"none", b"/", _MS_REC | _MS_PRIVATE)  # nothing below propagates back to the host
    # Opened in the new namespace (a bind takes a source from it only), before /tmp is covered.
    fds = [(os.open(source, os.O_PATH), path) for source, path in staged]
    if _libc.mount(b"tmpfs", os.fsencode(STAGE_ROOT), b"tmpfs", 0, b"mode=0755,size=64k") != 0:
        err = _get_errno()
        raise OSError(err, os.strerror(err), STAGE_ROOT)
    for fd, path in fds:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(b"/proc/self/fd/%d" % fd, path, _MS_BIND | _MS_REC)
        os.close(fd)
