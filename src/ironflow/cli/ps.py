"""``ironflow ps``: what is running now, as the store and this machine know it.

What it lists, and where that comes from, is :mod:`ironflow.engine.running`'s report (the UI's
live page shows the same). Pending runs are not running yet (``ironflow runs list --status
pending``). Never creates a store; exit codes are :mod:`ironflow.cli.exits`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from ironflow.cli import tables
from ironflow.cli.formats import OutputFormat, age, document
from ironflow.cli.shared_options import StoreOption
from ironflow.cli.stores import opened, run_async
from ironflow.engine import running
from ironflow.local import workdirs

__all__ = ["register"]


def _where(sandbox: Mapping[str, Any] | None) -> str:
    if sandbox is None:
        return "-"
    if "child_run_id" in sandbox:
        return f"child run {sandbox['child_run_id']}"
    if "pods" in sandbox:
        return f"pods -l {sandbox['pods']}"
    if "local_dirs" not in sandbox:
        return f"local, on {sandbox['host'] or 'an unnamed worker'}"
    found = sandbox["local_dirs"]
    return found[0] if len(found) == 1 else f"local, pid {sandbox['pid']}: {len(found)} live sandbox dirs"


# --- the command -----------------------------------------------------------------------------


def _print_tables(shown: Mapping[str, Any]) -> None:
    items: list[Any] = []
    if not shown["runs"]:
        items.append("no run is running in the store")
    else:
        table = tables.new("RUN", "WORKFLOW", "BACKEND", "WORKER", "AGE", "STEP", "RUNNING", "SANDBOX")
        for run in shown["runs"]:
            workflow = run["workflow"].rsplit("/", 1)[-1]
            if run["parent_run_id"]:
                workflow += f" (in {run['parent_run_id']})"
            head = [run["id"], workflow, run["backend"], run["worker"] or "-", age(run["age_s"])]
            for index, step in enumerate(run["steps"] or [None]):
                cells = head if index == 0 else [""] * len(head)
                if step is None:
                    table.add_row(*cells, "-", "-", "-")
                else:
                    table.add_row(*cells, f"{step['position']} {step['name']}", age(step["running_s"]),
                                  _where(step["sandbox"]))  # fmt: skip
        items.append(table)
    if not shown["local_sandboxes"]:
        items.append("no live local sandbox on this machine")
    else:
        items.append("local sandboxes on this machine:")
        table = tables.new("DIR", "PID", "AGE", "RUNS OF THAT WORKER")
        for d in shown["local_sandboxes"]:
            table.add_row(d["path"], str(d["pid"]), age(d["age_s"]), ", ".join(d["runs"]) or "-")
        items.append(table)
    print(tables.render(*items, width=tables.stdout_width()))


async def _ps(store_url: str | None) -> dict[str, Any]:
    async with opened(store_url, create=False) as store:
        return await running.gather(store, local_dirs=lambda: workdirs.live_dirs(None))


def ps(
    store: StoreOption = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")] = OutputFormat.TABLE,
) -> None:
    """List what is running now: running runs and steps (any backend), and this machine's local sandboxes."""
    shown = run_async(_ps(store))
    if output is not OutputFormat.TABLE:
        print(document(shown, output))
    else:
        _print_tables(shown)


def register(app: typer.Typer) -> None:
    """Add ``ps`` to the ``ironflow`` app."""
    app.command("ps")(ps)
