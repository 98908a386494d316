"""What is running now, as a store and this machine know it: ``ironflow ps`` and the UI's live page.

What :func:`report` lists, and where that comes from:

* the store's runs in state ``running``, of every backend (a sub-workflow's run too, naming its
  parent), the worker holding each and how long ago it was queued;
* their steps in state ``running``, how long each has run and where its sandbox is: for agent
  steps of ``k8s`` and ``agent-sandbox`` the label selector of their pods (nobody asks the
  cluster whether the pod is still there); for agent steps of ``local``, the live sandbox
  temp dirs of the worker's process when that worker runs on this machine; a sub-workflow
  step's child run;
* this machine's live local sandbox temp dirs: ``ironflow-local-*`` in the system temp dir
  (where the CLI's workers make them), whose marker names a process that runs now
  (:func:`ironflow.local.workdirs.live_dirs`, which the CLI passes in: the engine imports no
  backend); one per running local agent step or proxied command, whichever store its run is
  in. A provider given another ``temp_dir`` is not seen.

Pending runs are not running yet. :func:`report` is pure; :func:`gather` reads the store and
this machine, then calls it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from ironflow import labels
from ironflow.engine import model, worker
from ironflow.engine.store import Store

__all__ = ["MAX_RUNS", "LocalDir", "LocalDirs", "gather", "report", "step_pod_selector"]

#: Most running runs one report reads.
MAX_RUNS: Final = 1000


class _Owner(Protocol):
    @property
    def pid(self) -> int: ...


class LocalDir(Protocol):
    """A live local sandbox temp dir, as the local backend finds it (:class:`ironflow.local.workdirs.LiveDir`)."""

    @property
    def path(self) -> str: ...

    @property
    def owner(self) -> _Owner: ...

    @property
    def created_at(self) -> float: ...


#: This machine's live local sandbox dirs, read when asked (the CLI passes the local backend's scan).
LocalDirs = Callable[[], Sequence[LocalDir]]


def step_pod_selector(run: model.RunRecord, step: model.StepRecord) -> str | None:
    """The label selector of an agent step's pods (``kubectl get pods -l …``); None for other
    kinds, and for a run on the local backend (its steps have no pods)."""
    if step.kind is not model.StepKind.AGENT or (run.backend or "local") == "local":
        return None
    return labels.selector(
        labels.RUNNER_SELECTOR, {labels.LABEL_RUN_ID: run.id, labels.LABEL_STEP: labels.sanitize_label_value(step.name)}
    )


def _sandbox(
    run: model.RunRecord, step: model.StepRecord, dirs_by_pid: Mapping[int, list[str]], host: str
) -> dict[str, Any] | None:
    """Where a running step's sandbox is, as far as ``ps`` can tell without asking a backend."""
    if step.child_run_id is not None:
        return {"child_run_id": step.child_run_id}
    if step.kind is not model.StepKind.AGENT:
        return None
    selector = step_pod_selector(run, step)
    if selector is not None:
        return {"pods": selector}
    process = worker.worker_process(run.worker or "")
    if process is None or process[0] != host:
        return {"host": process[0] if process else None}
    return {"host": host, "pid": process[1], "local_dirs": dirs_by_pid.get(process[1], [])}


def report(
    runs: Sequence[model.RunRecord],
    steps: Mapping[str, Sequence[model.StepRecord]],
    dirs: Sequence[LocalDir],
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


async def gather(
    store: Store, *, local_dirs: LocalDirs | None = None, now: float | None = None, host: str | None = None
) -> dict[str, Any]:
    """The :func:`report` of ``store``'s running runs and this machine's live local sandboxes
    (``local_dirs``; None: none are looked for)."""
    runs = await store.list_runs(status=model.RunStatus.RUNNING, limit=MAX_RUNS)
    steps = {run.id: await store.steps(run.id) for run in runs}
    return report(
        runs,
        steps,
        [] if local_dirs is None else local_dirs(),
        host=socket.gethostname() if host is None else host,
        now=time.time() if now is None else now,
    )
