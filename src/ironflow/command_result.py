"""What a command produced, wherever it ran (pure).

A module of its own, apart from :mod:`ironflow.results` (which still names it): a command's
path (``ironflow exec``, a session's client) imports this and creates none of the agent result
classes, each a frozen dataclass whose methods are compiled at import (about 1 ms apiece).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ironflow.workspaces import WorkspaceChanges

__all__ = ["CommandResult"]


@dataclass(frozen=True)
class CommandResult:
    """What a command produced, wherever it ran: a plain command in a local sandbox
    (``run_command``) or a command in a sandbox session. ``duration`` in seconds; with a
    workspace, what the command changed there (``workspace``); ``timed_out`` when a session
    killed it at its limit (a plain command past its limit raises ``CommandTimeout`` instead);
    ``killed``, in one line, why the sandbox killed it or one of its processes (its memory
    limit), None when nothing was.

    ``stdout`` and ``stderr`` keep the start and the end of what it wrote (the provider's
    ``output_keep_bytes``, or the session client's ``keep_bytes``, of each); ``*_bytes`` say how
    much it wrote, ``*_cut`` how many bytes of that are left out, where a marker line stands.
    """

    exit_code: int
    stdout: str
    stderr: str
    duration: float = 0.0
    workspace: WorkspaceChanges | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_cut: int = 0
    stderr_cut: int = 0
    timed_out: bool = False
    killed: str | None = None
