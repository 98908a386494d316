"""``ironflow sandbox exec`` on a ``sandbox serve``: one command in an open session, its output
streamed as it comes, its exit code passed on.

The checks of its input, and the call itself over :mod:`ironflow.sessions.one_call` (blocking, no
event loop, nothing of a session's client), for the Typer command and for its common call read
without Typer (:mod:`ironflow.cli.quick`) alike. A terminal (``-t``) and a cluster's sessions
(``--provider``) take the session client (:mod:`ironflow.cli.sandbox_sessions`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from ironflow import errors
from ironflow.cli import exits, inputs
from ironflow.cli.formats import for_terminal
from ironflow.sessions import one_call, serve_access
from ironflow.sessions.ids import check_session_id

__all__ = ["checked", "finish", "run", "session_id"]


def session_id(value: str) -> str:
    """``value`` if it is a session id; else exit 2 naming the expected form."""
    try:
        return check_session_id(value)
    except errors.ConfigError as exc:
        exits.fail_for(exc)


def checked(args: list[str], timeout: float | None, env: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """The command (``args`` after a leading ``--``) and its variables; exits 2 on a missing
    command, a timeout that is no positive finite number, or a variable a session refuses."""
    argv = args[1:] if args[:1] == ["--"] else args
    if not argv:
        exits.fail("missing command: ironflow sandbox exec ID [OPTIONS] -- CMD [ARGS...]")
    if timeout is not None and not (0 < timeout < float("inf")):
        exits.fail(f"invalid --timeout {timeout:g}: use a finite number of seconds greater than zero")
    return argv, inputs.command_env(env)


def finish(code: int, timed_out: bool, timeout: float | None, sandbox_id: str) -> NoReturn:
    """Exit as the command did; a timeout is a failed command (as ``ironflow exec``'s), not the server's."""
    if timed_out:
        message = f"timed out: the command ran past --timeout {timeout or 0:g}s in {sandbox_id}"
        exits.fail(message, exits.EXIT_STEP_FAILED)
    raise SystemExit(code)


def write_output(stream: str, text: str) -> None:
    """A piece of the command's output, on our stream of its name (escaped for a terminal)."""
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.write(for_terminal(text, out))  # a terminal is not the command's
    out.flush()


def run(
    sandbox_id: str,
    args: list[str],
    *,
    server: str | None = None,
    timeout: float | None = None,
    cwd: str | None = None,
    env: list[str] | None = None,
) -> NoReturn:
    """Run ``args`` in the session on the server (``server``, else ``$IRONFLOW_SANDBOX_SERVER``)
    and exit as it did; every error is one line with its exit code."""
    session_id(sandbox_id)
    argv, variables = checked(args, timeout, env)
    try:
        url = serve_access.resolve_server(server)
        token = serve_access.resolve_token()
        code, timed_out = one_call.run(
            url, token, sandbox_id, argv, env=variables, cwd=cwd, timeout=timeout, on_output=write_output
        )
    except KeyboardInterrupt:  # the command was killed first
        exits.fail("interrupted", exits.EXIT_INTERRUPTED)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    except (FileNotFoundError, PermissionError) as exc:  # the runtime's 404 and 403 on a path (--cwd)
        exits.fail(str(exc))
    finish(code, timed_out, timeout, sandbox_id)
