"""The default store: one SQLite file, stdlib ``sqlite3`` on one dedicated thread.

Why a thread and no new dependency: every call is a few microseconds of SQLite work; one
thread owning the connection keeps calls ordered and the event loop free. Several worker
processes may share the file (WAL mode, ``BEGIN IMMEDIATE`` for claims, a busy timeout),
which is what the crash-recovery tests do; for several machines use PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar

from ironflow import errors, labels
from ironflow.engine import model, rows, sqlite_reads

__all__ = ["SqliteStore"]

T = TypeVar("T")


# Only constants are interpolated into these statements; every value is a parameter.
_SELECT_RUN_BY_ID: Final = f"{sqlite_reads.SELECT_RUN} WHERE id = ?"
_INSERT_RUN: Final = f"INSERT INTO ironflow_runs ({sqlite_reads.RUN_COLUMNS}) VALUES ({','.join('?' * 17)})"  # noqa: S608
_INSERT_TRANSCRIPT: Final = f"INSERT INTO ironflow_transcripts ({rows.TRANSCRIPT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)"  # noqa: S608
_SELECT_TRANSCRIPT: Final = (
    f"SELECT {rows.TRANSCRIPT_COLUMNS} FROM ironflow_transcripts "  # noqa: S608
    "WHERE run_id = ? AND seq > ? AND (? IS NULL OR position = ?) ORDER BY seq LIMIT ?"
)
#: The usage of run trees, summed over the agent steps that stored a result (``model.Usage.of_step``).
_RUN_TOTALS: Final = (
    "SELECT r.root_run_id AS run_id, "  # noqa: S608
    "COALESCE(SUM(json_extract(s.result, '$.input_tokens')), 0) AS input_tokens, "
    "COALESCE(SUM(json_extract(s.result, '$.output_tokens')), 0) AS output_tokens, "
    "COALESCE(SUM(json_extract(s.result, '$.cost_usd')), 0.0) AS cost_usd, count(*) AS agent_steps "
    "FROM ironflow_runs r JOIN ironflow_steps s ON s.run_id = r.id "
    "WHERE r.root_run_id IN ({ids}) AND s.kind = 'agent' "
    f"AND json_extract(s.result, '$.{model.AGENT_RESULT_MARK}') = 1 GROUP BY r.root_run_id"
)
#: The usage of one role's agent steps finished since a time (``Store.role_spend``).
_ROLE_SPEND: Final = (
    "SELECT COALESCE(SUM(json_extract(result, '$.input_tokens')), 0) AS input_tokens, "  # noqa: S608
    "COALESCE(SUM(json_extract(result, '$.output_tokens')), 0) AS output_tokens, "
    "COALESCE(SUM(json_extract(result, '$.cost_usd')), 0.0) AS cost_usd, count(*) AS agent_steps "
    f"FROM ironflow_steps WHERE kind = 'agent' AND json_extract(labels, '$.\"{labels.LABEL_ROLE}\"') = ? "
    f"AND finished_at >= ? AND json_extract(result, '$.{model.AGENT_RESULT_MARK}') = 1"
)
_RENEW: Final = (
    "UPDATE ironflow_runs SET lease_until = ?, updated_at = ? "  # noqa: S608
    f"WHERE id = ? AND worker = ? AND status = 'running' RETURNING {sqlite_reads.RUN_COLUMNS}"
)
_START_CHILD: Final = (
    f"INSERT INTO ironflow_runs ({sqlite_reads.RUN_COLUMNS}) "  # noqa: S608
    "VALUES (?,?,?,'running',?,?,?,NULL,NULL,1,NULL,NULL,?,0,?,?,?) "
    "ON CONFLICT (id) DO UPDATE SET status = 'running', attempt = attempt + 1, error = NULL, "
    f"output = NULL, cancel_requested = 0, updated_at = excluded.updated_at RETURNING {sqlite_reads.RUN_COLUMNS}"
)


class SqliteStore:
    """A :class:`~ironflow.engine.store.Store` in one SQLite file."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0, create: bool = True) -> None:
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._create = create
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    # -- plumbing --

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None or self._conn is None:
            raise errors.ConfigError("the SQLite store is not open; call `await store.open()` first")
        conn = self._conn
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, conn)
        except sqlite3.Error as exc:  # e.g. still locked by another process after the busy timeout
            raise errors.InfrastructureError(f"the SQLite store failed: {type(exc).__name__}: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        return sqlite_reads.connect(self.path, busy_timeout_s=self._busy_timeout_s, create=self._create)

    async def open(self) -> None:
        if self._conn is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ironflow-sqlite")
        loop = asyncio.get_running_loop()
        try:
            self._conn = await loop.run_in_executor(self._executor, self._connect)
            await loop.run_in_executor(self._executor, sqlite_reads.migrate, self._conn)
        except errors.ConfigError:
            await self.close()
            raise
        except sqlite3.Error as exc:
            await self.close()
            raise errors.ConfigError(f"cannot open the SQLite store {str(self.path)!r}: {exc}") from exc

    async def close(self) -> None:
        conn, executor = self._conn, self._executor
        self._conn, self._executor = None, None
        if executor is not None:
            if conn is not None:
                await asyncio.get_running_loop().run_in_executor(executor, conn.close)
            executor.shutdown(wait=True)

    # -- runs --

    async def create_run(self, run: model.RunRecord) -> model.RunRecord:
        now = time.time()
        input_json = model.to_json(run.input, what="the run input")

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                _INSERT_RUN,
                (
                    run.id, run.workflow, input_json, str(run.status), run.root_run_id, run.parent_run_id,
                    run.backend, None, rows.dumps(run.error), run.attempt, run.worker, run.lease_until,
                    run.available_at or now, int(run.cancel_requested), now, now, run.deadline_at,
                ),
            )  # fmt: skip

        await self._call(insert)
        stored = await self.get_run(run.id)
        assert stored is not None
        return stored

    async def get_run(self, run_id: str) -> model.RunRecord | None:
        def get(conn: sqlite3.Connection) -> model.RunRecord | None:
            row = conn.execute(_SELECT_RUN_BY_ID, (run_id,)).fetchone()
            return rows.run_from_row(row) if row else None

        return await self._call(get)

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
        query, params = sqlite_reads.runs_query(
            status=status, root_run_id=root_run_id, workflow=workflow, top_level=top_level, before=before, limit=limit
        )

        def list_(conn: sqlite3.Connection) -> list[model.RunRecord]:
            return [rows.run_from_row(r) for r in conn.execute(query, params).fetchall()]

        return await self._call(list_)

    async def run_totals(self, root_run_ids: Sequence[str]) -> dict[str, model.Usage]:
        ids = list(dict.fromkeys(root_run_ids))

        def totals(conn: sqlite3.Connection) -> dict[str, model.Usage]:
            found = conn.execute(
                _RUN_TOTALS.format(ids=",".join("?" * len(ids))),  # only placeholders are interpolated
                ids,
            ).fetchall()
            return rows.usage_by_run(ids, found)

        return await self._call(totals) if ids else {}

    async def role_spend(self, role: str, since: float) -> model.Usage:
        def spend(conn: sqlite3.Connection) -> model.Usage:
            return rows.usage_from_row(conn.execute(_ROLE_SPEND, (role, since)).fetchone())

        return await self._call(spend)

    async def match_run_ids(self, prefix: str, *, limit: int = 10) -> list[str]:
        def match(conn: sqlite3.Connection) -> list[str]:
            found = conn.execute(
                "SELECT id FROM ironflow_runs WHERE substr(id, 1, length(?)) = ? ORDER BY id LIMIT ?",
                (prefix, prefix, limit),
            )
            return [r["id"] for r in found.fetchall()]

        return await self._call(match)

    async def claim_run(self, worker: str, lease_s: float, *, run_id: str | None = None) -> model.RunRecord | None:
        def claim(conn: sqlite3.Connection) -> model.RunRecord | None:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT id FROM ironflow_runs WHERE parent_run_id IS NULL AND ("
                    " (status = 'pending' AND available_at <= ?) OR (status = 'running' AND lease_until < ?))"
                    " AND (? IS NULL OR id = ?) ORDER BY available_at, id LIMIT 1",
                    (now, now, run_id, run_id),
                ).fetchone()
                if row is None:
                    conn.execute("COMMIT")
                    return None
                conn.execute(
                    "UPDATE ironflow_runs SET status = 'running', worker = ?, lease_until = ?, "
                    "attempt = attempt + 1, updated_at = ? WHERE id = ?",
                    (worker, now + lease_s, now, row["id"]),
                )
                claimed = conn.execute(_SELECT_RUN_BY_ID, (row["id"],)).fetchone()
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return rows.run_from_row(claimed)

        return await self._call(claim)

    async def renew_lease(self, run_id: str, worker: str, lease_s: float) -> model.RunRecord | None:
        def renew(conn: sqlite3.Connection) -> model.RunRecord | None:
            now = time.time()
            row = conn.execute(
                _RENEW,
                (now + lease_s, now, run_id, worker),
            ).fetchone()
            return rows.run_from_row(row) if row else None

        return await self._call(renew)

    async def start_child_run(self, run: model.RunRecord) -> model.RunRecord:
        now = time.time()
        input_json = model.to_json(run.input, what="the sub-workflow input")

        def start(conn: sqlite3.Connection) -> model.RunRecord:
            row = conn.execute(
                _START_CHILD,
                (
                    run.id,
                    run.workflow,
                    input_json,
                    run.root_run_id,
                    run.parent_run_id,
                    run.backend,
                    now,
                    now,
                    now,
                    run.deadline_at,
                ),
            ).fetchone()
            return rows.run_from_row(row)

        return await self._call(start)

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

        def finish(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE ironflow_runs SET status = ?, output = ?, error = ?, worker = NULL, lease_until = NULL, "
                "updated_at = ? WHERE id = ? AND status = 'running' AND worker IS ?",
                (str(status), output_json, rows.dumps(error), time.time(), run_id, worker),
            )
            return cur.rowcount == 1

        return await self._call(finish)

    async def requeue_run(self, run_id: str, worker: str, *, error: dict[str, Any], delay_s: float) -> bool:
        def requeue(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cur = conn.execute(
                "UPDATE ironflow_runs SET status = 'pending', error = ?, worker = NULL, lease_until = NULL, "
                "available_at = ?, updated_at = ? WHERE id = ? AND status = 'running' AND worker = ?",
                (rows.dumps(error), now + delay_s, now, run_id, worker),
            )
            return cur.rowcount == 1

        return await self._call(requeue)

    async def queued_runs(self) -> int:
        def count(conn: sqlite3.Connection) -> int:
            # The partial index ironflow_runs_due (status, available_at) answers this alone.
            row = conn.execute(
                "SELECT count(*) FROM ironflow_runs WHERE parent_run_id IS NULL AND status = 'pending'"
            ).fetchone()
            return int(row[0])

        return await self._call(count)

    async def cancel_run(self, run_id: str) -> model.RunRecord | None:
        def cancel(conn: sqlite3.Connection) -> model.RunRecord | None:
            now = time.time()
            conn.execute(
                "UPDATE ironflow_runs SET status = CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END, "
                "cancel_requested = CASE WHEN status = 'running' THEN 1 ELSE cancel_requested END, updated_at = ? "
                "WHERE id = ?",
                (now, run_id),
            )
            row = conn.execute(_SELECT_RUN_BY_ID, (run_id,)).fetchone()
            return rows.run_from_row(row) if row else None

        return await self._call(cancel)

    async def retry_run(self, run_id: str) -> model.RunRecord | None:
        def retry(conn: sqlite3.Connection) -> model.RunRecord | None:
            now = time.time()
            conn.execute(
                "UPDATE ironflow_runs SET status = 'pending', error = NULL, output = NULL, cancel_requested = 0, "
                "available_at = ?, updated_at = ? WHERE id = ? AND status IN ('failed', 'cancelled') "
                "AND parent_run_id IS NULL",
                (now, now, run_id),
            )
            row = conn.execute(_SELECT_RUN_BY_ID, (run_id,)).fetchone()
            return rows.run_from_row(row) if row else None

        return await self._call(retry)

    # -- steps --

    async def steps(self, run_id: str) -> list[model.StepRecord]:
        def list_(conn: sqlite3.Connection) -> list[model.StepRecord]:
            found = conn.execute("SELECT * FROM ironflow_steps WHERE run_id = ? ORDER BY position", (run_id,))
            return [rows.step_from_row(r) for r in found.fetchall()]

        return await self._call(list_)

    async def save_step(self, step: model.StepRecord) -> None:
        params = rows.step_values(step)

        def save(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO ironflow_steps VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", params)

        await self._call(save)

    # -- transcripts --

    async def append_transcript(self, chunks: Sequence[model.TranscriptChunk]) -> None:
        def append(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")  # numbering and inserting are one step, across processes too
            try:
                last = {
                    run_id: conn.execute(
                        "SELECT COALESCE(MAX(seq), 0) FROM ironflow_transcripts WHERE run_id = ?", (run_id,)
                    ).fetchone()[0]
                    for run_id in {c.run_id for c in chunks}
                }
                conn.executemany(_INSERT_TRANSCRIPT, rows.transcript_values(chunks, last))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        if chunks:
            await self._call(append)

    async def transcript(
        self, run_id: str, *, position: int | None = None, after: int = 0, limit: int = 500
    ) -> list[model.TranscriptChunk]:
        def read(conn: sqlite3.Connection) -> list[model.TranscriptChunk]:
            found = conn.execute(_SELECT_TRANSCRIPT, (run_id, after, position, position, limit)).fetchall()
            return [rows.transcript_from_row(r) for r in found]

        return await self._call(read)

    # -- rate limits --

    async def record_rate_limits(self, windows: Sequence[model.RateWindow]) -> None:
        now = time.time()
        values = [rows.window_values(w, now) for w in windows]

        def record(conn: sqlite3.Connection) -> None:
            conn.executemany("INSERT OR REPLACE INTO ironflow_rate_limits VALUES (?,?,?,?,?,?,?)", values)

        if values:
            await self._call(record)

    async def rate_limits(self) -> list[model.RateWindow]:
        def list_(conn: sqlite3.Connection) -> list[model.RateWindow]:
            found = conn.execute("SELECT * FROM ironflow_rate_limits ORDER BY account, window, scope").fetchall()
            return [rows.window_from_row(r) for r in found]

        return await self._call(list_)
