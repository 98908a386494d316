"""``ironflow ui``: serve the web dashboard (:mod:`ironflow.ui`) of a store until Ctrl-C.

Bound to loopback by default. Another ``--host`` needs an admin token (``--token-file`` or
``$IRONFLOW_UI_TOKEN``), and is refused with one line without one; with a token, every page
asks for it (a sign-in form, or ``Authorization: Bearer``). Never creates a store; exit codes
are :mod:`ironflow.cli.exits`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Final

import typer

from ironflow import errors
from ironflow.cli import exits, inputs
from ironflow.cli.shared_options import StoreOption
from ironflow.cli.stores import opened, run_async
from ironflow.local import workdirs
from ironflow.ui import app as ui_app
from ironflow.ui import security

__all__ = ["TOKEN_ENV", "register", "ui"]

#: The environment variable holding the admin token when ``--token-file`` is not given.
TOKEN_ENV: Final = "IRONFLOW_UI_TOKEN"  # noqa: S105 - the variable's name, not a token
#: Fewer characters than this are too easy to guess for a token that guards a network port.
MIN_TOKEN_CHARS: Final = 16


def _token(token_file: Path | None) -> str | None:
    """The admin token from ``--token-file``, else ``$IRONFLOW_UI_TOKEN``, else None; exits 2 on a
    file that cannot be read or a token too short (never printing it)."""
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            exits.fail(f"cannot read --token-file '{token_file}': {getattr(exc, 'strerror', None) or 'not text'}")
        source = f"--token-file '{token_file}'"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = f"${TOKEN_ENV}"
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS:
        exits.fail(f"the admin token in {source} is shorter than {MIN_TOKEN_CHARS} characters; use a long random one")
    return token


def _local_dirs() -> list[workdirs.LiveDir]:
    """This machine's live local sandbox dirs, in the system temp dir (the UI's live page)."""
    return workdirs.live_dirs(None)


async def _serve(store_url: str | None, host: str, port: int, guard: security.UiSecurity) -> None:
    async with opened(store_url, create=False) as store, contextlib.AsyncExitStack() as stack:
        try:
            serving = await stack.enter_async_context(
                ui_app.serve(store, guard, host=host, port=port, base_dir=os.getcwd(), local_dirs=_local_dirs)
            )
        except errors.ConfigError as exc:  # the address cannot be bound
            exits.fail_for(exc)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        sign_in = "; sign in with the admin token" if guard.sign_in_required else ""
        print(f"ironflow ui on {serving.url}/{sign_in} (Ctrl-C stops)", file=sys.stderr, flush=True)
        await stop.wait()


def ui(
    store: StoreOption = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; other than loopback needs an admin token.")
    ] = ui_app.DEFAULT_HOST,
    port: Annotated[str, typer.Option("--port", help="Port to listen on (0: any free one).")] = str(
        ui_app.DEFAULT_PORT
    ),
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help=f"File holding the admin token (default ${TOKEN_ENV}).", show_default=False),
    ] = None,
) -> None:
    """Serve a web dashboard of the store's runs, steps, transcripts and live sandboxes."""
    token = _token(token_file)
    if token is None and not security.is_loopback(host):
        exits.fail(
            f"--host {host} is not a loopback address: give an admin token with --token-file FILE or ${TOKEN_ENV}"
        )
    run_async(_serve(store, host, inputs.port(port, "--port"), security.UiSecurity(token)))


def register(app: typer.Typer) -> None:
    """Add ``ui`` to the ``ironflow`` app."""
    app.command("ui")(ui)
