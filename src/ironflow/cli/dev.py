"""``ironflow dev …``: helpers for building workflows without a key, such as the offline model.

``ironflow dev fake-anthropic`` serves :class:`~ironflow.fake_model.server.FakeAnthropic`
until interrupted: the URL goes to stdout (so ``URL=$(…)`` style scripting works with a
background job), notes to stderr. Bad input exits 2 with one line naming the problem.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import sys
from pathlib import Path
from typing import Annotated

import typer

from ironflow import errors
from ironflow.cli import groups
from ironflow.cli.exits import fail
from ironflow.fake_model import server as fakes

__all__ = ["register"]

dev_app = groups.new_app(help="Development helpers: an offline Anthropic API.", no_args_is_help=True)


async def _serve(fake: fakes.FakeAnthropic) -> None:
    await fake.start()
    try:
        where = fake.unix_socket if fake.unix_socket is not None else fake.url
        print(fake.url if fake.unix_socket is None else f"unix:{where}", flush=True)
        turns = len(fake.script.turns)
        print(
            f"fake Anthropic API serving {turns} scripted turn(s) on {where}; Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        await asyncio.Event().wait()
    finally:
        await fake.close()


@dev_app.command("fake-anthropic")
def fake_anthropic(
    host: Annotated[str, typer.Option(help="Address to bind (keep loopback unless you mean it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port; 0 picks a free one.")] = 8085,
    script: Annotated[Path | None, typer.Option("--script", help="YAML script of replies (docs/claude.md).")] = None,
    unix_socket: Annotated[
        Path | None, typer.Option("--unix-socket", help="Serve on this unix socket instead of TCP.")
    ] = None,
) -> None:
    """Serve an offline Anthropic Messages API with scripted replies until Ctrl-C."""

    try:
        loaded = fakes.Script.from_yaml(script) if script is not None else fakes.Script()
    except errors.ConfigError as exc:
        fail(str(exc))
    if unix_socket is not None and unix_socket.exists():
        fail(f"--unix-socket {unix_socket} already exists; remove it or pick another path")
    fake = fakes.FakeAnthropic(loaded, host=host, port=port, unix_socket=unix_socket)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(fake))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            fail(f"{host}:{port} is already in use; pick another with --port (0 picks a free one)")
        fail(f"cannot serve on {unix_socket or f'{host}:{port}'}: {exc.strerror or exc}")


def register(app: typer.Typer) -> None:
    """Add the ``dev`` command group to the ``ironflow`` app."""
    app.add_typer(dev_app, name="dev")
