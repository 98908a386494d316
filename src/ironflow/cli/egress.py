"""``ironflow egress check``: would the egress proxy let this URL through, and which rule says so?

One line per URL on stdout, ``allowed URL — RULE`` or ``denied URL — REASON``, decided by
:func:`ironflow.egress.decide` exactly as the proxy decides before it resolves a name (the
answer after resolution depends on DNS, which this command never asks). Exit 0 when every URL
is allowed, 1 when any is denied, 2 on bad input (one line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ironflow import egress, errors, settings_file
from ironflow.cli import exits, groups
from ironflow.cli.formats import printable
from ironflow.egress import options

__all__ = ["register"]

egress_app = groups.new_app(help="Egress policies: check what a sandbox may reach.", no_args_is_help=True)


@egress_app.command("check")
def check(
    urls: Annotated[list[str], typer.Argument(metavar="URL", help="https://HOST/…, http://HOST/PATH or HOST:PORT.")],
    policy_file: Annotated[
        list[Path] | None,
        typer.Option("--policy", "--egress", metavar="FILE", help="A policy file (YAML or JSON); repeatable."),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option("--allow-host", metavar="HOST[:PORT]", help="Allow HOST (443 and 80; :* any port); repeatable."),
    ] = None,
    profile: Annotated[
        list[str] | None,
        typer.Option("--egress-profile", metavar="NAME", help="A named profile (pypi, npm, github…); repeatable."),
    ] = None,
    method: Annotated[str, typer.Option(help="The method of plain http:// requests.")] = "GET",
) -> None:
    """Say whether the egress policy allows each URL, and the rule or reason that decided."""
    try:
        files = [
            (f"egress file '{path}'", settings_file.read_text(path, what="egress file")) for path in policy_file or ()
        ]
        policy = options.policy_from_options(allow_host or (), profile or (), files)
        targets = [options.target(url, method=method.upper()) for url in urls]
    except errors.ConfigError as exc:
        exits.fail(exc.message)
    denied = False
    for url, target in zip(urls, targets, strict=True):
        found = egress.decide(policy, target.host, target.port, method=target.method, path=target.path)
        denied = denied or not found.allowed
        said = found.rule if found.allowed and found.rule is not None else found.reason
        typer.echo(printable(f"{'allowed' if found.allowed else 'denied'} {url} — {said}"))
    if denied:
        raise typer.Exit(exits.EXIT_STEP_FAILED)


def register(app: typer.Typer) -> None:
    """Add the ``egress`` command group to the ``ironflow`` app."""
    app.add_typer(egress_app, name="egress")
