"""``ironflow runs …``: list, show, cancel and retry the runs of a store.

Thin over :class:`~ironflow.engine.store.Store`; these commands never create a store's
directory (a mistyped ``--store`` is an error, not a new empty store). A run is named by its id
or a unique start of it (:func:`~ironflow.cli.stores.find_run`). Exit codes are
:mod:`ironflow.cli.exits`'s; an unknown or ambiguous run id, or a change the run's state refuses,
is bad input.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

import typer

from ironflow import errors, results
from ironflow.cli import exits, groups, run_listing, tables
from ironflow.cli.formats import OutputFormat, document
from ironflow.cli.shared_options import RunArgument, StoreOption
from ironflow.cli.stores import find_run, opened, plain, run_async
from ironflow.engine import budgets, model

__all__ = ["register"]

OutputOption = Annotated[OutputFormat, typer.Option("--output", "-o", help="table, json or yaml.")]

#: Characters of a step's result in the table's cell; a longer or multi-line one follows in full.
_RESULT_CELL = 80
#: Where a local run's agent step ran (it has no pods).
_LOCAL = "local sandbox"

runs_app = groups.new_app(help="List, show, cancel and retry runs.", no_args_is_help=True)


@runs_app.command("list")
def runs_list(
    store: StoreOption = None,
    status: Annotated[model.RunStatus | None, typer.Option(help="Only runs in this state.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.", min=1)] = 50,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """List runs, newest first."""
    run_listing.run(store=store, status=status, limit=limit, output=output)


async def _show(store_url: str | None, ref: str) -> tuple[model.RunRecord, list[model.StepRecord]]:
    async with opened(store_url, create=False) as store:
        run = await find_run(store, ref)
        return run, await store.steps(run.id)


@runs_app.command("show")
def runs_show(
    run_id: RunArgument,
    store: StoreOption = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Show a run: its state, its steps, their pods and their results."""
    from ironflow.engine import running  # the worker's modules: ``show``'s alone, never ``runs list``'s

    run, steps = run_async(_show(store, run_id))
    step_rows = [{**plain(s.to_dict()), "pods": running.step_pod_selector(run, s)} for s in steps]
    by_role = budgets.usage_by_role(steps)
    if output is not OutputFormat.TABLE:
        costs = {role: usage.cost_usd for role, usage in by_role.items()}
        print(document({**plain(run.to_dict()), "cost_by_role": costs, "steps": step_rows}, output))
        return
    shown: list[Any] = [f"run       {run.id}\nworkflow  {run.workflow}\nstatus    {run.status} (attempt {run.attempt})"]
    if run.parent_run_id:
        shown.append(f"parent    {run.parent_run_id}\nroot      {run.root_run_id}")
    if run.deadline_at is not None:
        shown.append(f"deadline  {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(run.deadline_at))}")
    if run.error:
        shown.append(f"error     {run.error['type']}: {run.error['message']}")
    if by_role:
        shown.append("by role   " + ", ".join(f"{role} {_role_cost(u)}" for role, u in by_role.items()))
    table = tables.new("#", "STEP", "KIND", "STATUS", "ATTEMPTS", "PODS / CHILD RUN", "RESULT")
    whole: list[tuple[model.StepRecord, str]] = []
    for s, row in zip(steps, step_rows, strict=True):
        result = s.result.text if hasattr(s.result, "text") else json.dumps(row["result"])
        if s.error:
            result = f"{s.error['type']}: {s.error['message']}"
        line = result.splitlines()[0] if result else ""
        if line != result or len(line) > _RESULT_CELL:
            line = line[: _RESULT_CELL - 1] + "…"
            whole.append((s, result))
        where = row["pods"] or s.child_run_id or (_LOCAL if s.kind is model.StepKind.AGENT else "-")
        table.add_row(str(s.position), s.name, str(s.kind), str(s.status), str(s.attempts), where, line)
    shown.append(table)
    for s, result in whole:  # a cell holds one line; the whole result follows the table
        shown += [f"\nstep {s.position} {s.name}:", result]
    if run.status is model.RunStatus.SUCCEEDED:
        shown.append(f"output {json.dumps(plain(run.output))}")
    print(tables.render(*shown, width=tables.stdout_width()))


def _role_cost(usage: model.Usage) -> str:
    steps = "1 step" if usage.agent_steps == 1 else f"{usage.agent_steps} steps"
    return f"${results.shown_usd(usage.cost_usd):g} ({steps})"


async def _change(store_url: str | None, ref: str, action: Literal["cancel", "retry"]) -> model.RunRecord:
    from ironflow.engine import run_changes

    async with opened(store_url, create=False) as store:
        run = await find_run(store, ref)
        try:
            return await run_changes.change_run(store, run, run_changes.RunAction(action))
        except errors.RunStateConflict as exc:
            exits.fail_for(exc)


@runs_app.command("cancel")
def runs_cancel(
    run_id: RunArgument,
    store: StoreOption = None,
) -> None:
    """Cancel a run: a pending one never runs; a running one's steps are stopped and the run released."""
    run = run_async(_change(store, run_id, "cancel"))
    print(f"run {run.id} {'cancelled' if run.status is model.RunStatus.CANCELLED else 'cancel requested'}")


@runs_app.command("retry")
def runs_retry(
    run_id: RunArgument,
    store: StoreOption = None,
) -> None:
    """Queue a failed or cancelled run again; its finished steps replay from the store."""
    run = run_async(_change(store, run_id, "retry"))
    print(f"run {run.id} {run.status}")


def register(app: typer.Typer) -> None:
    """Add the ``runs`` group to the ``ironflow`` app."""
    app.add_typer(runs_app, name="runs")
