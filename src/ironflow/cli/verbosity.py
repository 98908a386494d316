"""``-v`` / ``-q`` of every command: how much goes to stderr beside the results and the errors.

Set once by the root callback (``ironflow -v agent …``, ``ironflow -q run …``) before a command
runs; commands ask :func:`quiet` before a spinner or a ``note:`` line, and the worker takes
:func:`log_level` for its log lines. Errors are printed whatever the level: ``-q`` never hides one.

=======  ==================================================================
``-q``   results and errors only: no spinner, no ``note:``, no warning logs
(none)   spinners on a terminal, ``note:`` lines, warning logs
``-v``   and ironflow's info logs, one line each on stderr
``-vv``  and its debug logs
=======  ==================================================================
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import logging

__all__ = ["configure", "log_level", "note", "quiet"]

#: logging's levels (ERROR, WARNING, INFO; DEBUG beyond): a command without -v or -q loads no logging here.
_LEVELS: Final = {-1: 40, 0: 30, 1: 20}
_DEBUG: Final = 10
_state = {"level": 0}
#: What :func:`configure` changed on the ``ironflow`` logger, put back by the next call (tests run many).
_saved: list[tuple[list[logging.Handler], int, bool]] = []


def configure(verbose: int, quiet: bool) -> None:
    """Take ``-v`` (counted) and ``-q``; with either, ironflow's logs go to stderr at that level."""
    if not (_saved or quiet or verbose):
        _state["level"] = 0
        return
    import logging

    from ironflow import log_lines

    root = logging.getLogger("ironflow")
    if _saved:
        root.handlers[:], level, root.propagate = _saved.pop()
        root.setLevel(level)
    _state["level"] = -1 if quiet else min(verbose, 2)
    if not quiet and not verbose:
        return
    _saved.append((root.handlers[:], root.level, root.propagate))
    root.setLevel(log_level())
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(log_lines.TextFormatter())
        root.handlers[:], root.propagate = [handler], False


def quiet() -> bool:
    """``-q`` was given: print results and errors only."""
    return _state["level"] < 0


def log_level(default: int = _LEVELS[0]) -> int:
    """The logging level ``-v``/``-q`` ask for, or ``default`` with neither."""
    level = _state["level"]
    if level == 0:
        return default
    return _LEVELS.get(level, _DEBUG)


def note(message: str) -> None:
    """A ``note: …`` line on stderr (something the user may want to know), unless ``-q``."""
    if not quiet():
        print(f"note: {message}", file=sys.stderr)
