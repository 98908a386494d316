"""What tests read of a process in ``/proc``: whether it still runs, its command line, what runs below it.

Read at the moment asked: a process may end between two calls, and each answers for a gone
process as for an ended one (not running, no argv, no children).
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["alive", "argv_of", "descendants", "running"]


def running(pid: int) -> bool:
    """Still running: a zombie (or a dead one being released) is gone, though not yet reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def alive(pids: set[int]) -> set[int]:
    """The processes of ``pids`` still running."""
    return {pid for pid in pids if running(pid)}


def argv_of(pid: int) -> list[str]:
    """The command line of ``pid`` (empty once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found
