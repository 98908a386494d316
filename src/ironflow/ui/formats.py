"""How the UI writes times, durations, tokens, money and workflow names (pure).

>>> [duration(s) for s in (None, 0.0123, 4.56, 75, 3 * 3600 + 61)]
['-', '12 ms', '4.6 s', '1 m 15 s', '3 h 01 m']
>>> tokens(1234567), cost(0.01234), cost(0.0), short_workflow("/src/examples/review.py:review")
('1,234,567', '$0.0123', '-', 'review.py:review')
"""

from __future__ import annotations

import datetime as dt

from ironflow.engine import model

__all__ = [
    "cost",
    "duration",
    "run_duration",
    "short_workflow",
    "step_duration",
    "timestamp",
    "tokens",
    "workflow_label",
]


def timestamp(at: float | None) -> str:
    """Unix seconds as UTC to the second (``2026-12-01 18:05:16Z``); ``-`` for none."""
    if not at:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(seconds: float | None) -> str:
    """A duration as a person reads it: milliseconds under a second, then s, m s, h m."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} m {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} m"


def run_duration(run: model.RunRecord, now: float) -> float | None:
    """From queued to finished (to ``now`` while it runs); None while it waits in the queue."""
    if run.finished:
        return run.updated_at - run.created_at
    if run.status is model.RunStatus.RUNNING:
        return now - run.created_at
    return None


def step_duration(step: model.StepRecord, now: float) -> float:
    """From its first attempt's start to its end (to ``now`` while it runs)."""
    return (step.finished_at if step.finished_at is not None else now) - step.started_at


def tokens(count: int) -> str:
    return f"{count:,}" if count else "-"


def cost(usd: float) -> str:
    return f"${usd:.4f}" if usd else "-"


def workflow_label(ref: str, base_dir: str) -> str:
    """A workflow reference relative to ``base_dir`` (where the UI was started) when it lies under it.

    >>> workflow_label("/src/proj/examples/review.py:review", "/src/proj")
    'examples/review.py:review'
    """
    prefix = base_dir.rstrip("/") + "/"
    return ref.removeprefix(prefix) if base_dir and ref.startswith(prefix) else ref


def short_workflow(ref: str) -> str:
    """A workflow reference without its directories, as ``ironflow runs list`` shows it."""
    return ref.rsplit("/", 1)[-1]
