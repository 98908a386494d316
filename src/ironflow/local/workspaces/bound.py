"""A workspace copy's size while its sandbox runs: the sandbox is stopped once it holds more than
``max_total_bytes`` (I/O).

The copy lives on the host's disk and the sandbox writes it directly (a bind mount), so only the
per-file ``RLIMIT_FSIZE`` bounded a write: a step filled 6 GiB past a 4 GiB bound. Without a
filesystem of its own per copy (a quota or a loop device needs root), the copy is measured while
the sandbox runs, as the kubelet measures a pod's ``emptyDir`` against its ``sizeLimit``: each
walk is beneath the copy's fd with no symlink followed (:mod:`ironflow.local.workspaces.tree_reads`), a file
counts its length or its allocated blocks, whichever is more (a sparse file counts whole: a patch
reads it whole), and the next walk comes sooner the nearer the copy is to its bound. What a
sandbox writes between two walks passes the bound: at most :data:`FILL_RATE` times the wait,
and the wait near the bound is :data:`MIN_WAIT_S`.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import stat
import time
from collections.abc import Awaitable, Callable
from typing import Final

from ironflow.local.workspaces import tree_reads
from ironflow.local.workspaces.copies import PreparedWorkspace
from ironflow.local.workspaces.tree_reads import DIR_FLAGS

__all__ = ["FILL_RATE", "MIN_WAIT_S", "measure", "over_bound", "stop_when"]

#: The write rate the wait between walks assumes (bytes/s): a local disk's page cache takes about this.
FILL_RATE: Final = 2 << 30
MIN_WAIT_S: Final = 0.05
MAX_WAIT_S: Final = 1.0
#: A walk costs at most this share of the time between walks (a copy of a million files walks slowly).
_WALK_SHARE: Final = 0.2
#: A directory vanishing, or turned into a symlink or file, while it is walked: the next walk sees it.
_MOVED: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EXDEV, errno.EAGAIN})


def measure(root: str, bound: int) -> tuple[int, str | None]:
    """The bytes the tree at ``root`` holds, counted until past ``bound``; with a reason when the
    sandbox must stop (past the bound, or a directory the host cannot read beneath the root)."""
    total = 0
    pending = [""]
    root_fd = os.open(root, DIR_FLAGS)
    try:
        while pending:
            rel = pending.pop()
            try:
                dir_fd = tree_reads.open_beneath(root_fd, rel, DIR_FLAGS) if rel else os.dup(root_fd)
            except OSError as exc:
                if exc.errno in _MOVED:
                    continue
                return total, f"the workspace holds a directory the host cannot read ({os.strerror(exc.errno or 0)})"
            prefix = f"{rel}/" if rel else ""
            try:
                with os.scandir(dir_fd) as it:
                    for item in it:
                        try:
                            st = item.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        used = st.st_blocks * 512
                        if stat.S_ISREG(st.st_mode):
                            used = max(used, st.st_size)
                        elif stat.S_ISDIR(st.st_mode):
                            pending.append(prefix + item.name)
                        total += used
                        if total > bound:
                            return total, (
                                f"the step wrote over {bound} bytes into its workspace (the workspace's "
                                "max_total_bytes): its sandbox was stopped"
                            )
            finally:
                os.close(dir_fd)
    finally:
        os.close(root_fd)
    return total, None


def _wait(total: int, bound: int, walk_s: float) -> float:
    """Seconds to the next walk: the time the rest of the bound takes to fill at :data:`FILL_RATE`,
    within [:data:`MIN_WAIT_S`, :data:`MAX_WAIT_S`], and never less than the walk's own cost allows."""
    fill_s = (bound - total) / FILL_RATE
    return max(min(max(fill_s, MIN_WAIT_S), MAX_WAIT_S), walk_s / _WALK_SHARE)


async def over_bound(root: str, bound: int) -> str:
    """Returns (only) once the tree at ``root`` holds more than ``bound`` bytes: why its sandbox stops."""
    while True:
        start = time.monotonic()
        try:
            total, problem = await asyncio.to_thread(measure, root, bound)
        except OSError:  # the copy itself is gone: its sandbox is being torn down
            total, problem = 0, None
        if problem is not None:
            return problem
        await asyncio.sleep(_wait(total, bound, time.monotonic() - start))


def stop_when(prepared: PreparedWorkspace | None) -> Callable[[], Awaitable[str]] | None:
    """What stops a sandbox that holds ``prepared`` (:meth:`~ironflow.local.sandbox.launch.SandboxProcesses.run`'s
    ``stop_when``): its copy past the workspace's ``max_total_bytes``; None without a workspace."""
    if prepared is None:
        return None
    return functools.partial(over_bound, prepared.copy, prepared.spec.max_total_bytes)
