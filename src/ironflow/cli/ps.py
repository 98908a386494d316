"""``ironflow ps``: what is running now, as the store and this machine know it.

What it lists, and where that comes from:

* the store's runs in state ``running``, of every backend (a sub-workflow's run too, naming its
  parent), the worker holding each and how long ago it was queued;
* their steps in state ``running``, how long each has run and where its sandbox is: for agent
  steps of ``k8s`` and ``agent-sandbox`` the label selector of their pods (``ps`` does not ask
  the cluster whether the pod is still there); for agent steps of ``local``, the live sandbox
  temp dirs of the worker's process when that worker runs on this machine; a sub-workflow
  step's child run;
* this machine's live local sandbox temp dirs: ``ironflow-local-*`` in the system temp dir
  (where the CLI's workers make them), whose marker names a process that runs now
  (:func:`ironflow.local.workdirs.live_dirs`); one per running local agent step or proxied
  command, whichever store its run is in. A provider given another ``temp_dir`` is not seen.

Pending runs are not running yet (``ironflow runs list --status pending``). Never creates a
store; exit codes are :mod:`ironflow.cli.exits`'s.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

import typer
from rich.console import Console
from rich.table import Table

from ironflow.cli.formats import OutputFormat, age
from ironflow.cli.runs import step_pod_selector
from ironflow.cli.stores import StoreOption, opened, run_async
from ironflow.engine import model, worker
from ironflow.local import workdirs

__all__ = ["register", "report"]

#: Most running runs one ``ps`` reads.
_MAX_RUNS: Final = 1000


# --- the report (pure) -----------------------------------------------------------------------


def _sandbox(
    run: model.RunRecord, step: model.StepRecord, dirs_by_pid: Mapping[int, list[str]], host: str
) -> dict[str, Any] | None:
    """Where a running step's sandbox is, as far as ``ps`` can tell without asking a backend."""
    if step.child_run_id is not None:
        return {"child_run_id": step.child_run_id}
    if step.kind is not model.StepKind.AGENT:
        return None
    if (run.backend or "local") != "local":
        return {"pods": step_pod_selector(run.id, step)}
    process = worker.worker_process(run.worker or "")
    if process is None or process[0] != host:
        return {"host": process[0] if process else None}
    return {"host": host, "pid": process[1], "local_dirs": dirs_by_pid.get(process[1], [])}


def report(
    runs: Sequence[model.RunRecord],
    steps: Mapping[str, Sequence[model.StepRecord]],
    dirs: Sequence[workdirs.LiveDir],
    *,
    host: str,
    now: float,
) -> dict[str, Any]:
    """What ``ps`` shows, as JSON: the running runs with their running steps, then this machine's
    live local sandbox dirs with the runs their owner (a worker process) holds."""
    dirs_by_pid: dict[int, list[str]] = {}
    for d in dirs:
        dirs_by_pid.setdefault(d.owner.pid, []).append(d.path)
    runs_by_pid: dict[int, list[str]] = {}
    for run in runs:
        process = worker.worker_process(run.worker or "")
        if process is not None and process[0] == host:
            runs_by_pid.setdefault(process[1], []).append(run.id)
    return {
        "runs": [
            {
                "id": run.id,
                "workflow": run.workflow,
                "backend": run.backend or "local",
                "worker": run.worker,
                "parent_run_id": run.parent_run_id,
                "age_s": round(max(now - run.created_at, 0), 3),
                "steps": [
                    {
                        "position": s.position,
                        "name": s.name,
                        "kind": str(s.kind),
                        "running_s": round(max(now - s.started_at, 0), 3),
                        "sandbox": _sandbox(run, s, dirs_by_pid, host),
                    }
                    for s in steps.get(run.id, ())
                    if s.status is model.StepStatus.RUNNING
                ],
            }
            for run in sorted(runs, key=lambda r: (r.created_at, r.id))
        ],
        "local_sandboxes": [
            {
                "path": d.path,
                "pid": d.owner.pid,
                "age_s": round(max(now - d.created_at, 0), 3),
                "runs": runs_by_pid.get(d.owner.pid, []),
            }
            for d in dirs
        ],
    }


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
    console = Console(width=240)
    if not shown["runs"]:
        console.print("no run is running in the store", highlight=False)
    else:
        table = Table("RUN", "WORKFLOW", "BACKEND", "WORKER", "AGE", "STEP", "RUNNING", "SANDBOX", box=None)
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
        console.print(table)
    if not shown["local_sandboxes"]:
        console.print("no live local sandbox on this machine", highlight=False)
        return
    console.print("local sandboxes on this machine:", highlight=False)
    table = Table("DIR", "PID", "AGE", "RUNS OF THAT WORKER", box=None)
    for d in shown["local_sandboxes"]:
        table.add_row(d["path"], str(d["pid"]), age(d["age_s"]), ", ".join(d["runs"]) or "-")
    console.print(table)


async def _ps(store_url: str | None) -> dict[str, Any]:
    async with opened(store_url, create=False) as store:
        runs = await store.list_runs(status=model.RunStatus.RUNNING, limit=_MAX_RUNS)
        steps = {run.id: await store.steps(run.id) for run in runs}
    return report(runs, steps, workdirs.live_dirs(None), host=socket.gethostname(), now=time.time())


def ps(
    store: StoreOption = None,
    output: Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")] = OutputFormat.TABLE,
) -> None:
    """List what is running now: running runs and steps (any backend), and this machine's local sandboxes."""
    shown = run_async(_ps(store))
    if output is OutputFormat.JSON:
        print(json.dumps(shown, indent=2))
    else:
        _print_tables(shown)


def register(app: typer.Typer) -> None:
    """Add ``ps`` to the ``ironflow`` app."""
    app.command("ps")(ps)
