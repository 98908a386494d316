"""``ironflow sandbox watch ID [PATH]``: a session directory's changes, one line each, as they happen.

A client of ``serve`` (or, with ``--provider``, of the cluster) like the other session commands
(:mod:`ironflow.cli.sandbox_sessions`); the events are :class:`~ironflow.sessions.values.WatchEvent`
from ``sandbox.files.watch``. Text lines are for people (a name's control characters shown as
escapes, never obeyed by the terminal); ``-o json`` prints one JSON object per line. A path outside
the workspace or no directory exits 2 in one line; Ctrl-C ends the watch (130).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ironflow import errors
from ironflow.cli import exits
from ironflow.cli.formats import ResultFormat, printable
from ironflow.cli.session_backends import BackendOption, ProviderOption, ServerOption, Target, choose, session_client
from ironflow.cli.stores import run_async
from ironflow.sessions.values import WatchEvent, check_session_id

__all__ = ["render_event", "watch"]


def _name(text: str) -> str:
    return printable(text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"))


def render_event(event: WatchEvent, output: ResultFormat) -> str:
    """One event as one line (pure): ``create d/x``, ``rename a -> b``, ``overflow: 3 events dropped``.

    >>> render_event(WatchEvent("rename", "b", old_name="a"), ResultFormat.TEXT)
    'rename a -> b'
    >>> render_event(WatchEvent("create", "d", is_dir=True), ResultFormat.JSON)
    '{"type": "create", "name": "d", "is_dir": true}'
    """
    if output is ResultFormat.JSON:
        return json.dumps(event.to_json())
    if event.type == "overflow":
        lost = "events were dropped" if event.dropped is None else f"{event.dropped} events dropped"
        return f"overflow: {_name(event.name)} is not watched (the watch limit)" if event.name else f"overflow: {lost}"
    suffix = "/" if event.is_dir else ""
    if event.type == "rename" and event.old_name is not None:
        return f"rename {_name(event.old_name)}{suffix} -> {_name(event.name)}{suffix}"
    return f"{event.type} {_name(event.name)}{suffix}"


def watch(
    sandbox_id: Annotated[str, typer.Argument(metavar="ID", help="The session's id.", show_default=False)],
    path: Annotated[str, typer.Argument(metavar="[PATH]", help="A directory in the session's workspace.")] = ".",
    server: ServerOption = None,
    backend: BackendOption = None,
    provider: ProviderOption = None,
    recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Its whole tree, not only its entries.")] = False,
    output: Annotated[
        ResultFormat,
        typer.Option("--output", "-o", help="text: a line per event for people; json: a JSON object per line."),
    ] = ResultFormat.TEXT,
) -> None:
    """Print the changes under a session's directory, one line each, until Ctrl-C or the session ends."""
    try:
        check_session_id(sandbox_id)
    except errors.ConfigError as exc:
        exits.fail_for(exc)
    if output is ResultFormat.YAML:
        exits.fail("-o yaml has no line per event: use -o json or -o text")
    target = Target(server, backend, provider)
    choose(target)  # a bad combination exits 2 before anything is reached

    async def go() -> None:
        async with session_client(target) as sessions:
            sandbox = await sessions.connect(sandbox_id)
            try:
                async for event in sandbox.files.watch(path, recursive=recursive):
                    print(render_event(event, output), flush=True)
            finally:
                await sandbox.disconnect()

    try:
        run_async(go())
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    except PermissionError:
        exits.fail(f"cannot watch '{_name(path)}': it leaves the session's workspace")
    except FileNotFoundError:
        exits.fail(f"cannot watch '{_name(path)}': no such directory in the session")
    sys.stdout.flush()


def register(group: typer.Typer) -> None:
    """Add ``watch`` to the ``ironflow sandbox`` group."""
    group.command("watch")(watch)
