"""``ironflow reap``: delete the expired objects ironflow left in a namespace, once or periodically.

A thin face over :func:`ironflow.k8s.reaper.reap_namespace`: the report goes to stdout
(a table or JSON), warnings and progress to stderr. ``--dry-run`` lists what a pass
would delete and deletes nothing. Exit codes are :mod:`ironflow.cli.exits`'s: bad input
(a missing kubeconfig, a namespace that does not exist) 2, an API failure 3.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Final

import typer
from rich.console import Console

from ironflow import errors
from ironflow.cli import backends, exits, inputs, shared_options, tables, verbosity
from ironflow.cli.formats import OutputFormat, document
from ironflow.k8s import reaper
from ironflow.kube.clusters import ClusterConfig

__all__ = ["OutputFormat", "parse_interval", "reap", "register", "render_report"]

_INTERVAL: Final = re.compile(r"(?P<num>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)?")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_interval(text: str) -> float:
    """``5m``, ``30s``, ``1h``, ``250ms`` or plain seconds into seconds (pure); > 0 or ValueError."""
    match = _INTERVAL.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid interval '{text}': use a number with s, m or h, e.g. 5m")
    seconds = float(match["num"]) * _UNITS[match["unit"] or "s"]
    if seconds <= 0:
        raise ValueError("orphan reaper interval must be greater than zero")
    return seconds


def render_report(report: reaper.ReapReport, namespace: str, fmt: OutputFormat, *, width: int | None = None) -> str:
    """The report as stdout text: a JSON (one line) or YAML object, or a table of kinds, counts and names
    (boxed at a terminal's ``width``, plain for None: :mod:`ironflow.cli.tables`) (pure)."""
    if fmt is not OutputFormat.TABLE:
        return document({"namespace": namespace, **report.to_dict()}, fmt, indent=None)
    verb = "would delete" if report.dry_run else "deleted"
    table = tables.new(title=f"ironflow reap {namespace} ({verb})", boxed=True)
    table.add_column("kind")
    table.add_column(verb, justify="right")
    table.add_column("names")
    rows = (
        ("Job", report.jobs_deleted, report.jobs),
        ("Pod", report.pods_deleted, report.pods),
        ("ConfigMap", report.configmaps_deleted, report.configmaps),
        ("PersistentVolumeClaim", report.pvcs_deleted, report.pvcs),
    )
    for kind, count, names in rows:
        table.add_row(kind, str(count), ", ".join(names))
    return tables.render(table, width=width)


async def _reap(
    cluster: ClusterConfig, namespace: str, *, dry_run: bool, every: float | None, fmt: OutputFormat
) -> None:

    err = Console(stderr=True)
    async with await backends.connect(cluster) as api:
        await backends.require_namespace(api, namespace)
        while True:
            if verbosity.quiet() or not err.is_terminal:
                report = await reaper.reap_namespace(api, namespace, dry_run=dry_run)
            else:
                with err.status(f"reaping {namespace}..."):
                    report = await reaper.reap_namespace(api, namespace, dry_run=dry_run)
            for warning in report.warnings:
                err.print(f"warning: {warning}", highlight=False)
            typer.echo(render_report(report, namespace, fmt, width=tables.stdout_width()))
            if every is None:
                return
            await asyncio.sleep(every)


def reap(
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace to reap.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    every: Annotated[
        str | None, typer.Option("--every", help="Run a pass every interval (e.g. 5m) until interrupted.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.TABLE,
    kubeconfig: shared_options.KubeconfigOption = None,
    context: shared_options.ContextOption = None,
) -> None:
    """Delete expired ironflow pods, Jobs, prompt ConfigMaps and environment claims in a namespace."""
    inputs.dns_label(namespace)
    interval: float | None = None
    if every is not None:
        try:
            interval = parse_interval(every)
        except ValueError as exc:
            exits.fail(str(exc))
    cluster = backends.kube_cluster(kubeconfig, context)
    try:
        asyncio.run(_reap(cluster, namespace, dry_run=dry_run, every=interval, fmt=output))
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    except KeyboardInterrupt:
        raise typer.Exit(exits.EXIT_INTERRUPTED) from None


def register(app: typer.Typer) -> None:
    """Add ``ironflow reap`` to the app."""
    app.command("reap")(reap)
