"""The exit codes of every ``ironflow`` command, and the one way to leave with an error line.

The code follows the error's branch (:mod:`ironflow.errors`), so every command answers the
same failure the same way:

====  ==========================================================================
0     success (``exec``: the command's own exit code is passed through)
1     the step or run failed (:class:`~ironflow.errors.AgentError`, anything else)
2     bad input (:class:`~ironflow.errors.UsageError`): an option, a file, a credential
3     infrastructure (:class:`~ironflow.errors.InfrastructureError`): the cluster, the
      sandbox runtime, the proxy or the store could not be reached or failed
130   interrupted (Ctrl-C)
====  ==========================================================================

Every failure is one ``error: …`` line on stderr; none prints a traceback.
"""

from __future__ import annotations

import sys
from typing import Final, NoReturn

from ironflow import errors

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_INFRASTRUCTURE",
    "EXIT_INTERRUPTED",
    "EXIT_STEP_FAILED",
    "exit_code_for",
    "fail",
    "fail_for",
    "in_file",
    "usage_line",
]

EXIT_STEP_FAILED: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_INFRASTRUCTURE: Final = 3
EXIT_INTERRUPTED: Final = 130


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code of an error: its branch decides (pure)."""
    if isinstance(exc, errors.UsageError):
        return EXIT_BAD_INPUT
    if isinstance(exc, errors.InfrastructureError):
        return EXIT_INFRASTRUCTURE
    return EXIT_STEP_FAILED


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (bad input by default).

    Trailing whitespace goes (a failed agent's stderr ends with a newline): the line ends once.
    A message may carry what a sandbox wrote: its control characters are shown as escapes.
    """
    from ironflow.cli.formats import printable  # here: ``--help`` loads no topic's modules

    print(f"error: {printable(message.rstrip())}", file=sys.stderr)
    raise SystemExit(code)


def fail_for(exc: errors.IronflowError) -> NoReturn:
    """Leave with ``exc``'s message and its branch's exit code.

    A step's failure keeps its lines (they carry the agent's stderr); any other error is
    joined into one line (a Kubernetes message may wrap).
    """
    code = exit_code_for(exc)
    fail(exc.message if code == EXIT_STEP_FAILED else " ".join(exc.message.split()), code)


def in_file(what: str, path: object, message: str) -> str:
    """``message`` about a file, naming the file when it does not already (pure).

    >>> in_file("provider file", "p.yaml", "unknown key 'namspace'; did you mean 'namespace'?")
    "provider file 'p.yaml': unknown key 'namspace'; did you mean 'namespace'?"
    """
    return message if str(path) in message else f"{what} '{path}': {message}"


def usage_line(exc: BaseException) -> str:
    """A parse error (Typer's) as the one line every bad input gets (pure): the parser's message, a "did
    you mean" for a mistyped command, and where the help is.

    Typer draws these as a box under a usage block; a script's log wants one line it can grep.
    """
    format_message = getattr(exc, "format_message", None)
    message = " ".join((format_message() if format_message else str(exc)).split())
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return message
    group = ctx.command
    if message.startswith("No such command") and hasattr(group, "list_commands") and "Did you mean" not in message:
        commands = list(group.list_commands(ctx))
        typed = message.split("'", 2)[1] if message.count("'") >= 2 else ""
        import difflib  # a mistyped command's alone

        near = difflib.get_close_matches(typed, commands, n=1, cutoff=0.6)
        message = message.rstrip(".") + (f"; did you mean '{near[0]}'?" if near else f"; one of: {', '.join(commands)}")
    message = message.replace(". Did you mean", "; did you mean").replace("Value error, ", "")
    return f"{message[:1].lower()}{message[1:].rstrip('.')} (see '{ctx.command_path} -h')"
