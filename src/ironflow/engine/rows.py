"""Database rows into run, step and window records, for both stores (pure).

A row is anything indexable by column name (``sqlite3.Row``, ``asyncpg.Record``) whose
JSON columns are text; both stores select the same column names, so one mapping serves.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from ironflow.engine import model

__all__ = ["Row", "dumps", "run_from_row", "step_from_row", "window_from_row"]


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def dumps(value: Any) -> str | None:
    """Compact JSON of an engine-written value (errors, labels); None stays SQL NULL."""
    return None if value is None else json.dumps(value, separators=(",", ":"))


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
