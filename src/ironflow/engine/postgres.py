"""The PostgreSQL store: several workers on several machines share one queue of runs.

Claims use ``FOR UPDATE SKIP LOCKED`` so workers never wait on each other's rows; leases
and due times use the server's clock, so workers with skewed clocks agree on expiry.
The schema is the versioned SQL under ``engine/migrations/``, applied by the shared
runner :mod:`ironflow.migrations` (an advisory lock, ``(component, version)`` records) so
several workers starting at once migrate once.
The DSN (which may hold a password) never appears in a message or a repr.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import asyncpg

from ironflow import errors, labels, migrations
from ironflow.engine import model, rows

__all__ = ["MIGRATIONS_COMPONENT", "PostgresStore"]

T = TypeVar("T")

#: The (component, version) key the schema versions are recorded under.
MIGRATIONS_COMPONENT: Final = "engine"
_MIGRATIONS_PACKAGE: Final = "ironflow.engine.migrations"

_NOW: Final = "extract(epoch from clock_timestamp())::float8"
#: A run's columns as :func:`rows.run_from_row` reads them (JSON as text).
_RUN_COLUMNS: Final = (
    "id, workflow, input::text AS input, status, root_run_id, parent_run_id, backend, "
    "output::text AS output, error::text AS error, attempt, worker, lease_until, available_at, "
    "cancel_requested, created_at, updated_at, deadline_at"
)
_RETURN_RUN: Final = f"RETURNING {_RUN_COLUMNS}"
# Only constants are interpolated below; every value is a parameter.
_SELECT_RUN: Final = f"SELECT {_RUN_COLUMNS} FROM ironflow_runs"  # noqa: S608
_CLAIM: Final = f"""
UPDATE ironflow_runs r
SET status = 'running', worker = $1, lease_until = {_NOW} + $2, attempt = r.attempt + 1, updated_at = {_NOW}
FROM (
    SELECT id AS due_id FROM ironflow_runs
    WHERE parent_run_id IS NULL AND status IN ('pending', 'running')
      AND ((status = 'pending' AND available_at <= {_NOW}) OR (status = 'running' AND lease_until < {_NOW}))
      AND ($3::text IS NULL OR id = $3)
    ORDER BY available_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
) due
WHERE r.id = due.due_id
{_RETURN_RUN}
"""  # noqa: S608
_LIST_RUNS: Final = (
    f"{_SELECT_RUN} WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR root_run_id = $2) "
    "AND ($3::text IS NULL OR workflow = $3 OR right(workflow, length($3) + 1) = '/' || $3) "
    "AND (NOT $4::boolean OR parent_run_id IS NULL) AND ($5::text IS NULL OR id < $5) "
    "ORDER BY id DESC LIMIT $6"
)
#: The usage of run trees, summed over the agent steps that stored a result (``model.Usage.of_step``).
#: The steps are summed per run (LATERAL) so the plan starts from the page's runs (the ``root_run_id``
#: index), never from a scan of every step: the planner guesses the JSON test's selectivity far too low.
_RUN_TOTALS: Final = (
    "SELECT r.root_run_id AS run_id, COALESCE(SUM(u.input_tokens), 0) AS input_tokens, "  # noqa: S608
    "COALESCE(SUM(u.output_tokens), 0) AS output_tokens, COALESCE(SUM(u.cost_usd), 0) AS cost_usd, "
    "COALESCE(SUM(u.agent_steps), 0) AS agent_steps FROM ironflow_runs r CROSS JOIN LATERAL ("
    "SELECT SUM((s.result->>'input_tokens')::bigint) AS input_tokens, "
    "SUM((s.result->>'output_tokens')::bigint) AS output_tokens, SUM((s.result->>'cost_usd')::float8) AS cost_usd, "
    "count(*) AS agent_steps FROM ironflow_steps s WHERE s.run_id = r.id AND s.kind = 'agent' "
    f"AND s.result->>'{model.AGENT_RESULT_MARK}' = '1') u "
    "WHERE r.root_run_id = ANY($1::text[]) GROUP BY r.root_run_id"
)
#: The usage of one role's agent steps finished since a time (``Store.role_spend``).
_ROLE_SPEND: Final = (
    "SELECT COALESCE(SUM((result->>'input_tokens')::bigint), 0) AS input_tokens, "  # noqa: S608
    "COALESCE(SUM((result->>'output_tokens')::bigint), 0) AS output_tokens, "
    "COALESCE(SUM((result->>'cost_usd')::float8), 0) AS cost_usd, count(*) AS agent_steps "
    f"FROM ironflow_steps WHERE kind = 'agent' AND labels->>'{labels.LABEL_ROLE}' = $1 AND finished_at >= $2 "
    f"AND result->>'{model.AGENT_RESULT_MARK}' = '1'"
)
_RENEW: Final = (
    f"UPDATE ironflow_runs SET lease_until = {_NOW} + $3, updated_at = {_NOW} "  # noqa: S608
    f"WHERE id = $1 AND worker = $2 AND status = 'running' {_RETURN_RUN}"
)
_CREATE: Final = (
    "INSERT INTO ironflow_runs (id, workflow, input, status, root_run_id, parent_run_id, backend, attempt, "  # noqa: S608
    f"available_at, created_at, updated_at, deadline_at) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, "
    f"COALESCE($9, {_NOW}), {_NOW}, {_NOW}, $10) {_RETURN_RUN}"
)
_START_CHILD: Final = (
    "INSERT INTO ironflow_runs (id, workflow, input, status, root_run_id, parent_run_id, backend, attempt, "  # noqa: S608
    f"available_at, created_at, updated_at, deadline_at) VALUES ($1, $2, $3::jsonb, 'running', $4, $5, $6, 1, "
    f"{_NOW}, {_NOW}, {_NOW}, $7) ON CONFLICT (id) DO UPDATE SET status = 'running', "
    "attempt = ironflow_runs.attempt + 1, error = NULL, output = NULL, cancel_requested = false, "
    f"updated_at = {_NOW} {_RETURN_RUN}"
)
_FINISH: Final = (
    "UPDATE ironflow_runs SET status = $3, output = $4::jsonb, error = $5::jsonb, worker = NULL, "  # noqa: S608
    f"lease_until = NULL, updated_at = {_NOW} WHERE id = $1 AND status = 'running' AND worker IS NOT DISTINCT FROM $2"
)
_REQUEUE: Final = (
    "UPDATE ironflow_runs SET status = 'pending', error = $3::jsonb, worker = NULL, lease_until = NULL, "  # noqa: S608
    f"available_at = {_NOW} + $4, updated_at = {_NOW} WHERE id = $1 AND status = 'running' AND worker = $2"
)
_CANCEL: Final = (
    "UPDATE ironflow_runs SET status = CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END, "  # noqa: S608
    "cancel_requested = (cancel_requested OR status = 'running'), "
    f"updated_at = {_NOW} WHERE id = $1 {_RETURN_RUN}"
)
_RETRY: Final = (
    "UPDATE ironflow_runs SET status = 'pending', error = NULL, output = NULL, cancel_requested = false, "  # noqa: S608
    f"available_at = {_NOW}, updated_at = {_NOW} WHERE id = $1 AND status IN ('failed', 'cancelled') "
    "AND parent_run_id IS NULL"
)
_SAVE_STEP: Final = """
INSERT INTO ironflow_steps (run_id, position, id, name, kind, status, result, error, attempts, child_run_id,
    labels, started_at, finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $11::jsonb, $12, $13)
ON CONFLICT (run_id, position) DO UPDATE SET id = excluded.id, name = excluded.name, kind = excluded.kind,
    status = excluded.status, result = excluded.result, error = excluded.error, attempts = excluded.attempts,
    child_run_id = excluded.child_run_id, labels = excluded.labels, started_at = excluded.started_at,
    finished_at = excluded.finished_at
"""
_SELECT_STEPS: Final = (
    "SELECT run_id, position, id, name, kind, status, result::text AS result, error::text AS error, attempts, "
    "child_run_id, labels::text AS labels, started_at, finished_at FROM ironflow_steps WHERE run_id = $1 "
    "ORDER BY position"
)
#: First key of the advisory lock that serialises the appends to one run's transcript (the second is
#: the run id's hash); two-key locks never meet the one-key lock of :mod:`ironflow.migrations`.
_TRANSCRIPT_LOCK: Final = 0x1F0F
_LAST_SEQS: Final = (
    "SELECT run_id, MAX(seq) AS seq FROM ironflow_transcripts WHERE run_id = ANY($1::text[]) GROUP BY run_id"
)
_INSERT_TRANSCRIPT: Final = (
    f"INSERT INTO ironflow_transcripts ({rows.TRANSCRIPT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"  # noqa: S608
)
_SELECT_TRANSCRIPT: Final = (
    f"SELECT {rows.TRANSCRIPT_COLUMNS} FROM ironflow_transcripts "  # noqa: S608
    "WHERE run_id = $1 AND seq > $2 AND ($3::integer IS NULL OR position = $3) ORDER BY seq LIMIT $4"
)
_RECORD_WINDOW: Final = """
INSERT INTO ironflow_rate_limits (account, "window", scope, status, utilization, resets_at, recorded_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (account, "window", scope) DO UPDATE SET status = excluded.status,
    utilization = excluded.utilization, resets_at = excluded.resets_at, recorded_at = excluded.recorded_at
"""


_DB_ERRORS: Final = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


class _Db:
    """The pool's query methods, with driver errors turned into ``InfrastructureError`` (retryable)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @staticmethod
    def _error(exc: BaseException) -> errors.InfrastructureError:
        # asyncpg messages name tables and constraints, never the DSN.
        return errors.InfrastructureError(f"the PostgreSQL store failed: {type(exc).__name__}: {exc}")

    async def fetchone(self, query: str, *args: Any) -> asyncpg.Record:
        row = await self.fetchrow(query, *args)
        if row is None:
            raise errors.InfrastructureError("the PostgreSQL store returned no row where one was written")
        return row

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        try:
            return list(await self._pool.fetch(query, *args))
        except _DB_ERRORS as exc:
            raise self._error(exc) from exc

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        """One row, or None (an INSERT … RETURNING always has one)."""
        try:
            return await self._pool.fetchrow(query, *args)
        except _DB_ERRORS as exc:
            raise self._error(exc) from exc

    async def execute(self, query: str, *args: Any) -> str:
        try:
            return str(await self._pool.execute(query, *args))
        except _DB_ERRORS as exc:
            raise self._error(exc) from exc

    async def executemany(self, query: str, args: Any) -> None:
        try:
            await self._pool.executemany(query, args)
        except _DB_ERRORS as exc:
            raise self._error(exc) from exc

    async def transaction(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """``work`` on one connection inside one transaction (committed when it returns)."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                return await work(conn)
        except _DB_ERRORS as exc:
            raise self._error(exc) from exc


class PostgresStore:
    """A :class:`~ironflow.engine.store.Store` on PostgreSQL through an asyncpg pool."""

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        self._db: _Db | None = None

    def __repr__(self) -> str:
        return "PostgresStore(<dsn hidden>)"

    @property
    def pool(self) -> _Db:
        if self._db is None:
            raise errors.ConfigError("the PostgreSQL store is not open; call `await store.open()` first")
        return self._db

    async def open(self) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(self._dsn, min_size=self._min_size, max_size=self._max_size)
        except (OSError, asyncpg.PostgresError) as exc:
            # The exception text of a failed connect can echo the DSN; name only its type.
            raise errors.InfrastructureError(
                f"cannot connect to the PostgreSQL store ({type(exc).__name__}); check the URL and that "
                "the server is reachable"
            ) from None
        except ValueError:  # the URL does not parse; its text holds the password, so it is not repeated
            raise errors.ConfigError(
                "the PostgreSQL store URL is not valid; use postgresql://USER:PASSWORD@HOST[:PORT]/DATABASE "
                "(percent-encode special characters)"
            ) from None
        self._db = _Db(self._pool)
        await self._migrate()

    async def _migrate(self) -> None:
        assert self._pool is not None
        async with self._pool.acquire() as conn:
            await migrations.migrate(conn, MIGRATIONS_COMPONENT, _MIGRATIONS_PACKAGE)

    async def close(self) -> None:
        pool, self._pool, self._db = self._pool, None, None
        if pool is not None:
            await pool.close()

    # -- runs --

    async def create_run(self, run: model.RunRecord) -> model.RunRecord:
        row = await self.pool.fetchone(
            _CREATE,
            run.id,
            run.workflow,
            model.to_json(run.input, what="the run input"),
            str(run.status),
            run.root_run_id,
            run.parent_run_id,
            run.backend,
            run.attempt,
            run.available_at or None,
            run.deadline_at,
        )
        return rows.run_from_row(row)

    async def get_run(self, run_id: str) -> model.RunRecord | None:
        row = await self.pool.fetchrow(f"{_SELECT_RUN} WHERE id = $1", run_id)
        return rows.run_from_row(row) if row else None

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
        found = await self.pool.fetch(
            _LIST_RUNS,
            str(status) if status is not None else None,
            root_run_id,
            workflow,
            top_level,
            before,
            limit,
        )
        return [rows.run_from_row(r) for r in found]

    async def run_totals(self, root_run_ids: Sequence[str]) -> dict[str, model.Usage]:
        ids = list(dict.fromkeys(root_run_ids))
        return rows.usage_by_run(ids, await self.pool.fetch(_RUN_TOTALS, ids)) if ids else {}

    async def role_spend(self, role: str, since: float) -> model.Usage:
        return rows.usage_from_row(await self.pool.fetchone(_ROLE_SPEND, role, float(since)))

    async def match_run_ids(self, prefix: str, *, limit: int = 10) -> list[str]:
        found = await self.pool.fetch(
            "SELECT id FROM ironflow_runs WHERE left(id, length($1)) = $1 ORDER BY id LIMIT $2", prefix, limit
        )
        return [r["id"] for r in found]

    async def claim_run(self, worker: str, lease_s: float, *, run_id: str | None = None) -> model.RunRecord | None:
        row = await self.pool.fetchrow(_CLAIM, worker, float(lease_s), run_id)
        return rows.run_from_row(row) if row else None

    async def renew_lease(self, run_id: str, worker: str, lease_s: float) -> model.RunRecord | None:
        row = await self.pool.fetchrow(_RENEW, run_id, worker, float(lease_s))
        return rows.run_from_row(row) if row else None

    async def start_child_run(self, run: model.RunRecord) -> model.RunRecord:
        row = await self.pool.fetchone(
            _START_CHILD,
            run.id,
            run.workflow,
            model.to_json(run.input, what="the sub-workflow input"),
            run.root_run_id,
            run.parent_run_id,
            run.backend,
            run.deadline_at,
        )
        return rows.run_from_row(row)

    async def finish_run(
        self,
        run_id: str,
        worker: str | None,
        *,
        status: model.RunStatus,
        output: Any = None,
        error: dict[str, Any] | None = None,
    ) -> bool:
        output_json = rows.output_value(output)
        result = await self.pool.execute(_FINISH, run_id, worker, str(status), output_json, rows.dumps(error))
        return bool(result.endswith(" 1"))

    async def requeue_run(self, run_id: str, worker: str, *, error: dict[str, Any], delay_s: float) -> bool:
        result = await self.pool.execute(_REQUEUE, run_id, worker, rows.dumps(error), float(delay_s))
        return bool(result.endswith(" 1"))

    async def queued_runs(self) -> int:
        # Within the partial index ironflow_runs_due (pending and running top-level runs only).
        row = await self.pool.fetchone(
            "SELECT count(*) AS queued FROM ironflow_runs WHERE parent_run_id IS NULL AND status = 'pending'"
        )
        return int(row["queued"])

    async def cancel_run(self, run_id: str) -> model.RunRecord | None:
        row = await self.pool.fetchrow(_CANCEL, run_id)
        return rows.run_from_row(row) if row else None

    async def retry_run(self, run_id: str) -> model.RunRecord | None:
        await self.pool.execute(_RETRY, run_id)
        return await self.get_run(run_id)

    # -- steps --

    async def steps(self, run_id: str) -> list[model.StepRecord]:
        return [rows.step_from_row(r) for r in await self.pool.fetch(_SELECT_STEPS, run_id)]

    async def save_step(self, step: model.StepRecord) -> None:
        await self.pool.execute(_SAVE_STEP, *rows.step_values(step))

    # -- transcripts --

    async def append_transcript(self, chunks: Sequence[model.TranscriptChunk]) -> None:
        run_ids = sorted({c.run_id for c in chunks})  # locked in one order: two appends never deadlock

        async def append(conn: asyncpg.Connection) -> None:
            for run_id in run_ids:
                await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", _TRANSCRIPT_LOCK, run_id)
            last = {r["run_id"]: r["seq"] for r in await conn.fetch(_LAST_SEQS, run_ids)}
            await conn.executemany(_INSERT_TRANSCRIPT, rows.transcript_values(chunks, last))

        if chunks:
            await self.pool.transaction(append)

    async def transcript(
        self, run_id: str, *, position: int | None = None, after: int = 0, limit: int = 500
    ) -> list[model.TranscriptChunk]:
        found = await self.pool.fetch(_SELECT_TRANSCRIPT, run_id, after, position, limit)
        return [rows.transcript_from_row(r) for r in found]

    # -- rate limits --

    async def record_rate_limits(self, windows: Sequence[model.RateWindow]) -> None:
        if not windows:
            return
        now = time.time()
        await self.pool.executemany(_RECORD_WINDOW, [rows.window_values(w, now) for w in windows])

    async def rate_limits(self) -> list[model.RateWindow]:
        found = await self.pool.fetch(
            'SELECT account, "window", scope, status, utilization, resets_at, recorded_at FROM ironflow_rate_limits '
            'ORDER BY account, "window", scope'
        )
        return [rows.window_from_row(r) for r in found]
