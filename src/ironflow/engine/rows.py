"""Database rows into run, step, transcript and window records and back, for both stores (pure).

A row is anything indexable by column name (``sqlite3.Row``, ``asyncpg.Record``) whose
JSON columns are text; both stores select the same column names, so one mapping serves.
Going the other way, both stores bind the same column values in the same order, so one
encoding serves too: a None value is SQL NULL in either store.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from ironflow.engine import model

__all__ = [
    "TRANSCRIPT_COLUMNS",
    "Row",
    "dumps",
    "output_value",
    "run_from_row",
    "step_from_row",
    "step_values",
    "transcript_from_row",
    "transcript_values",
    "usage_by_run",
    "window_from_row",
    "window_values",
]


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def dumps(value: Any) -> str | None:
    """Compact JSON of an engine-written value (errors, labels); None stays SQL NULL."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


def output_value(output: Any) -> str | None:
    """The ``output`` column of a finished run: its JSON, or NULL when the workflow returned None."""
    return None if output is None else model.stored_json(output, what="the workflow's return value")


def step_values(step: model.StepRecord) -> tuple[Any, ...]:
    """The 13 columns of ``ironflow_steps`` in table order, JSON columns as text (NULL for None), the
    result redacted (:func:`~ironflow.engine.model.stored_json`)."""
    what = f"the result of step {step.name!r}"
    result = None if step.result is None else model.stored_json(step.result, what=what)
    return (
        step.run_id, step.position, step.id, step.name, str(step.kind), str(step.status), result,
        dumps(dict(step.error) if step.error else None), step.attempts, step.child_run_id,
        dumps(dict(step.labels) if step.labels else None), step.started_at, step.finished_at,
    )  # fmt: skip


#: The columns of ``ironflow_transcripts`` in table order, as both stores select and insert them.
TRANSCRIPT_COLUMNS: Final = "run_id, seq, position, step, attempt, stream, content, at"


def transcript_values(chunks: Sequence[model.TranscriptChunk], last: Mapping[str, int]) -> list[tuple[Any, ...]]:
    """The 8 columns of ``ironflow_transcripts`` per chunk, in table order: each run's chunks are
    numbered in the given order after ``last[run_id]`` (its highest stored ``seq``; none: 0)."""
    seqs = dict(last)
    out = []
    for c in chunks:
        seqs[c.run_id] = seq = seqs.get(c.run_id, 0) + 1
        out.append((c.run_id, seq, c.position, c.step, c.attempt, str(c.stream), c.text, c.at))
    return out


def window_values(window: model.RateWindow, now: float) -> tuple[Any, ...]:
    """The 7 columns of ``ironflow_rate_limits`` in table order; a window with no ``recorded_at``
    (0, the model's default) is recorded at ``now``."""
    return (
        window.account, window.window, window.scope, str(window.status), window.utilization, window.resets_at,
        window.recorded_at or now,
    )  # fmt: skip


def _loads(raw: str | None) -> Any:
    return json.loads(raw) if raw else None


def run_from_row(row: Row) -> model.RunRecord:
    return model.RunRecord(
        id=row["id"],
        workflow=row["workflow"],
        input=model.from_json(row["input"]),
        status=model.RunStatus(row["status"]),
        root_run_id=row["root_run_id"],
        parent_run_id=row["parent_run_id"],
        backend=row["backend"],
        output=model.from_json(row["output"]),
        error=_loads(row["error"]),
        attempt=row["attempt"],
        worker=row["worker"],
        lease_until=row["lease_until"],
        available_at=row["available_at"],
        cancel_requested=bool(row["cancel_requested"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        deadline_at=row["deadline_at"],
    )


def step_from_row(row: Row) -> model.StepRecord:
    return model.StepRecord(
        run_id=row["run_id"],
        position=row["position"],
        id=row["id"],
        name=row["name"],
        kind=model.StepKind(row["kind"]),
        status=model.StepStatus(row["status"]),
        result=model.from_json(row["result"]),
        error=_loads(row["error"]),
        attempts=row["attempts"],
        child_run_id=row["child_run_id"],
        labels=_loads(row["labels"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
    )


def transcript_from_row(row: Row) -> model.TranscriptChunk:
    return model.TranscriptChunk(
        run_id=row["run_id"],
        seq=row["seq"],
        position=row["position"],
        step=row["step"],
        attempt=row["attempt"],
        stream=model.TranscriptStream(row["stream"]),
        text=row["content"],
        at=row["at"],
    )


def window_from_row(row: Row) -> model.RateWindow:
    return model.RateWindow(
        account=row["account"],
        window=row["window"],
        scope=row["scope"],
        status=model.WindowStatus(row["status"]),
        utilization=row["utilization"],
        resets_at=row["resets_at"],
        recorded_at=row["recorded_at"],
    )


def usage_from_row(row: Row) -> model.Usage:
    """A row of the summed usage columns (``input_tokens``, ``output_tokens``, ``cost_usd``, ``agent_steps``)."""
    return model.Usage(
        int(row["input_tokens"]), int(row["output_tokens"]), float(row["cost_usd"]), int(row["agent_steps"])
    )


def usage_by_run(run_ids: Sequence[str], found: Sequence[Row]) -> dict[str, model.Usage]:
    """``run_totals`` rows (``run_id``, the summed usage columns) by run id; a run with no row is zero."""
    out = {run_id: model.Usage() for run_id in run_ids}
    for row in found:
        out[row["run_id"]] = usage_from_row(row)
    return out
