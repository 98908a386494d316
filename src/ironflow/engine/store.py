"""The Store protocol the runner and the workers talk to, and ``open_store(url)``.

A store keeps runs, their steps' results and transcripts, and the rate-limit windows of
Provider Accounts; it never keeps a credential (a transcript is redacted before it is
appended). Two backends implement it: SQLite (one file, the default) and PostgreSQL (several
workers on several machines). Both pass the same tests (``tests/engine/integration/``).

Lease rule: a top-level run is taken by one worker at a time (``claim_run``); the worker
renews its lease while it executes; a run whose lease ran out is taken again by any
worker. Sub-workflow runs are never claimed: their parent's execution drives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

from ironflow.engine import model, sqlite
from ironflow.engine.store_urls import STORE_ENV, default_store_url, sqlite_path

__all__ = [
    "DEFAULT_LEASE_S",
    "STORE_ENV",
    "Store",
    "default_store_url",
    "open_store",
]

#: How long a worker holds a run without renewing; renewals come every third of it.
DEFAULT_LEASE_S: Final = 30.0


class Store(Protocol):
    """Durable runs and steps. Every method is atomic on its own."""

    async def open(self) -> None:
        """Connect and bring the schema up to date (idempotent, safe with several workers)."""
        ...

    async def close(self) -> None: ...

    async def create_run(self, run: model.RunRecord) -> model.RunRecord:
        """Insert a new run (pending, or running for a sub-workflow its parent executes)."""
        ...

    async def get_run(self, run_id: str) -> model.RunRecord | None: ...

    async def list_runs(
        self,
        *,
        status: model.RunStatus | None = None,
        root_run_id: str | None = None,
        workflow: str | None = None,
        top_level: bool = False,
        before: str | None = None,
        limit: int = 50,
    ) -> list[model.RunRecord]:
        """Newest first (by id), at most ``limit``.

        ``workflow`` matches the reference whole or its end after a ``/`` (``review.py:review``);
        ``top_level`` leaves out sub-workflow runs; ``before`` is a run id: only older runs, so a
        page of runs continues where the last one ended (a cursor, never an offset).
        """
        ...

    async def run_totals(self, root_run_ids: Sequence[str]) -> dict[str, model.Usage]:
        """The :class:`~ironflow.engine.model.Usage` of each top-level run's tree (its agent steps and
        those of its sub-workflow runs), by run id; a run without agent results sums to zero.

        One query for a page of runs: the runs' ``root_run_id`` index and the steps' primary key answer it.
        """
        ...

    async def role_spend(self, role: str, since: float) -> model.Usage:
        """What the agent steps of ``role`` (label ``ironflow.io/role``) that finished at or after
        ``since`` spent, over every run (:mod:`ironflow.engine.budgets`)."""
        ...

    async def match_run_ids(self, prefix: str, *, limit: int = 10) -> list[str]:
        """The ids of the runs (sub-workflow runs too) that start with ``prefix``, sorted; at most ``limit``."""
        ...

    async def claim_run(self, worker: str, lease_s: float, *, run_id: str | None = None) -> model.RunRecord | None:
        """Take one due pending run, or a running one whose lease expired; None when idle.

        The returned record is running, held by ``worker``, with ``attempt`` counted up.
        With ``run_id`` only that run is taken (``ironflow run --wait`` executes its own run).
        """
        ...

    async def renew_lease(self, run_id: str, worker: str, lease_s: float) -> model.RunRecord | None:
        """Extend the lease; None when ``worker`` lost it (the run must stop)."""
        ...

    async def start_child_run(self, run: model.RunRecord) -> model.RunRecord:
        """Create a sub-workflow run as running, or mark the existing one running again (replay)."""
        ...

    async def finish_run(
        self,
        run_id: str,
        worker: str | None,
        *,
        status: model.RunStatus,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        """End a run held by ``worker`` (None: a sub-workflow run). False when the lease was lost."""
        ...

    async def requeue_run(self, run_id: str, worker: str, *, error: dict[str, Any], delay_s: float) -> bool:
        """Put a run back in the queue after a replayable failure; it is due after ``delay_s``."""
        ...

    async def queued_runs(self) -> int:
        """How many top-level runs are pending (due now or in a backoff): the queue's depth.

        Cheap enough to ask at every metrics scrape: both stores count from their index of live runs.
        """
        ...

    async def cancel_run(self, run_id: str) -> model.RunRecord | None:
        """Pending → cancelled; running → cancel requested (its worker stops it). None if unknown."""
        ...

    async def retry_run(self, run_id: str) -> model.RunRecord | None:
        """Failed or cancelled → pending again; finished steps will replay. None if unknown."""
        ...

    async def steps(self, run_id: str) -> list[model.StepRecord]:
        """The steps of a run in position order."""
        ...

    async def save_step(self, step: model.StepRecord) -> None:
        """Insert or replace the step at ``(run_id, position)``."""
        ...

    async def append_transcript(self, chunks: Sequence[model.TranscriptChunk]) -> None:
        """Add ``chunks`` to their runs' transcripts in the given order, numbering each run's after
        its last ``seq`` (atomic: concurrent appends to one run never share or skip a number)."""
        ...

    async def transcript(
        self, run_id: str, *, position: int | None = None, after: int = 0, limit: int = 500
    ) -> list[model.TranscriptChunk]:
        """The run's chunks numbered above ``after``, in order, at most ``limit``; with ``position``,
        only that step's. A follower passes the last ``seq`` it saw as ``after``."""
        ...

    async def record_rate_limits(self, windows: Sequence[model.RateWindow]) -> None:
        """Keep the latest state per (account, window, scope)."""
        ...

    async def rate_limits(self) -> list[model.RateWindow]: ...


def open_store(url: str | None = None, *, create: bool = True, **options: Any) -> Store:
    """A store for ``url``: ``sqlite:///path``, a plain file path, or ``postgresql://…``.

    The store is not opened yet; ``await store.open()`` connects and migrates. ``create=False``
    (a command that only reads or changes runs) refuses a SQLite file that does not exist
    rather than making it (or its directory); a PostgreSQL database is never created.
    """
    url = url or default_store_url()
    path = sqlite_path(url)
    if path is None:
        # asyncpg (about 0.1 s) loads only for a PostgreSQL store: a named exception to top-level
        # imports (tests/package/unit/test_layers.py lists them).
        from ironflow.engine.postgres import PostgresStore

        return PostgresStore(url, **options)
    return sqlite.SqliteStore(path, create=create, **options)
