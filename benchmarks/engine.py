"""Durable no-op steps: steps per second and p50 engine overhead per step, against DBOS Transact.

Each step is ``await ctx.op(name, noop)``: the time measured is what the engine adds
(record the step as running, run it, record its result). Cases: SQLite with one worker,
PostgreSQL (a throwaway server started here) with one worker and with four worker
processes sharing the queue. The peer, in the same run: DBOS Transact (``dbos`` from the
package index) on the same SQLite file and the same PostgreSQL server, the same durable
no-op steps (an async workflow of ``@DBOS.step()`` calls), one worker and four.

    python benchmarks/engine.py [--steps 2000] [--runs-4w 8] [--steps-4w 500]

Targets: <= 0.5 ms/step on SQLite, <= 2 ms/step on PostgreSQL, >= 1,000 steps/s with
four workers on PostgreSQL; ironflow steps/s ÷ DBOS steps/s >= 1.0 in each case. Last line:
``RESULT sqlite_step_ms=… pg_step_ms=… pg_steps_per_s_4w=… vs_dbos_sqlite=… vs_dbos_pg=… vs_dbos_pg_4w=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import sqlite3
import statistics
import sys
import tempfile
import time
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, EnqueueOptions, WorkflowHandle
from sqlalchemy import event

from ironflow.engine import Context, Runner, Worker, load_workflow, model, open_store
from ironflow.provider import ProviderBase
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig

DURATIONS: list[float] = []


async def _noop() -> None:
    return None


async def noops(ctx: Context, input: dict[str, Any]) -> int:
    """``input["steps"]`` durable no-op steps, each timed."""
    for i in range(input["steps"]):
        start = time.perf_counter()
        await ctx.op(f"step-{i}", _noop)
        DURATIONS.append(time.perf_counter() - start)
    return int(input["steps"])


class NullProvider(ProviderBase):
    """No agent steps run here; release_run is the only call the engine makes."""

    async def run(self, config: AgentConfig, *, logs: Any = None) -> AgentResult:
        raise NotImplementedError

    async def release_run(self, run_id: str) -> int:
        return 0

    def account_kind(self) -> str | None:
        return None


REF = f"{Path(__file__).resolve()}:noops"


def _durations() -> list[float]:
    """The timings list of the workflow module as the engine loaded it (by path, not as __main__)."""
    durations: list[float] = load_workflow(REF).__globals__["DURATIONS"]
    return durations


async def one_worker(url: str, steps: int) -> tuple[float, float]:
    """(p50 ms per step, steps per second) of one run executed by one in-process worker."""
    store = open_store(url)
    await store.open()
    try:
        await store.create_run(model.RunRecord(id=model.new_id(), workflow=REF, input={"steps": steps}))
        durations = _durations()
        durations.clear()
        provider = NullProvider()
        started = time.perf_counter()
        await Worker(store, lambda run: Runner(store, provider)).run(until_idle=True)
        elapsed = time.perf_counter() - started
        assert len(durations) == steps, "the benchmark run did not finish"
        return statistics.median(durations) * 1000, steps / elapsed
    finally:
        await store.close()


def _worker_process(url: str, go: MpEvent, out: Any) -> None:
    async def main() -> None:
        store = open_store(url)
        await store.open()
        provider = NullProvider()
        durations = _durations()
        go.wait()
        first = time.time()
        await Worker(store, lambda run: Runner(store, provider), poll_s=0.01).run(until_idle=True)
        out.put((len(durations), first, time.time()))
        await store.close()

    asyncio.run(main())


async def _create_runs(url: str, runs: int, steps: int) -> None:
    store = open_store(url)
    await store.open()
    for _ in range(runs):
        await store.create_run(model.RunRecord(id=model.new_id(), workflow=REF, input={"steps": steps}))
    await store.close()


def four_workers(url: str, runs: int, steps: int) -> float:
    """Steps per second of ``runs`` runs shared by four worker processes."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    asyncio.run(_create_runs(url, 0, steps))  # migrate before the workers race
    procs = [ctx.Process(target=_worker_process, args=(url, go, out)) for _ in range(4)]
    for p in procs:
        p.start()
    time.sleep(2.0)  # let every worker import and connect before the clock starts
    asyncio.run(_create_runs(url, runs, steps))
    go.set()
    results: list[tuple[int, float, float]] = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    total = sum(r[0] for r in results)
    assert total == runs * steps, f"expected {runs * steps} steps, ran {total}"
    return total / (max(r[2] for r in results) - min(r[1] for r in results))


# --- the peer: DBOS Transact, the same durable no-op steps on the same database ------------------
# Each DBOS case runs in a fresh spawned process (DBOS is one global instance per process). Its
# workflow is async with one @DBOS.step() per iteration, timed as ``noops`` times ``ctx.op``. On
# SQLite its connections get the durability ironflow's store uses (WAL, synchronous=NORMAL), so
# both pay for the same fsyncs. Four workers: four processes serve one DBOS queue (one workflow at
# a time each, polled every 10 ms as ironflow's workers poll); the clock runs from the first
# enqueue to the last result.

APP = "ironflow-bench"
QUEUE = "ironflow-bench"
DBOS_DURATIONS: list[float] = []


@event.listens_for(sa.engine.Engine, "connect")
def _same_durability(dbapi_conn: Any, _record: Any) -> None:
    if isinstance(dbapi_conn, sqlite3.Connection):
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")


@DBOS.step()
async def dbos_noop() -> None:
    return None


@DBOS.workflow()
async def dbos_noops(steps: int) -> int:
    for _ in range(steps):
        start = time.perf_counter()
        await dbos_noop()
        DBOS_DURATIONS.append(time.perf_counter() - start)
    return steps


def _dbos_url(url: str) -> str:
    """SQLAlchemy's form of a store URL: PostgreSQL through psycopg 3 (DBOS's driver)."""
    return "postgresql+psycopg://" + url.split("://", 1)[1] if url.startswith("postgresql://") else url


def _dbos_launch(url: str, executor: str = "local") -> None:
    config = {"name": APP, "system_database_url": _dbos_url(url), "application_version": "bench", "log_level": "ERROR"}
    DBOS(config={**config, "executor_id": executor})  # type: ignore[typeddict-item]
    DBOS.launch()


def _dbos_one(url: str, steps: int, out: Any) -> None:
    async def main() -> tuple[float, float]:
        _dbos_launch(url)
        try:
            started = time.perf_counter()
            handle = await DBOS.start_workflow_async(dbos_noops, steps)
            assert await handle.get_result() == steps
            elapsed = time.perf_counter() - started
            return statistics.median(DBOS_DURATIONS) * 1000, steps / elapsed
        finally:
            DBOS.destroy()

    out.put(asyncio.run(main()))


def dbos_one_worker(url: str, steps: int) -> tuple[float, float]:
    """(p50 ms per step, steps per second) of one DBOS workflow of ``steps`` no-op steps."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_dbos_one, args=(url, steps, out))
    proc.start()
    result: tuple[float, float] = out.get(timeout=600)
    proc.join(timeout=60)
    return result


def _dbos_serve(url: str, index: int, ready: Any, stop: MpEvent) -> None:
    _dbos_launch(url, f"worker-{index}")  # worker_concurrency counts per executor: one id each
    DBOS.register_queue(QUEUE, worker_concurrency=1, polling_interval_sec=0.01)
    ready.put(True)
    stop.wait()
    DBOS.destroy()


def dbos_four_workers(url: str, runs: int, steps: int) -> float:
    """Steps per second of ``runs`` workflows shared by four DBOS worker processes."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_dbos_serve, args=(url, i, ready, stop)) for i in range(4)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        client = DBOSClient(system_database_url=_dbos_url(url), application_name=APP)
        try:
            started = time.perf_counter()
            options: EnqueueOptions = {"queue_name": QUEUE, "workflow_name": dbos_noops.__qualname__}
            options["app_version"] = "bench"
            handles: list[WorkflowHandle[int]] = [client.enqueue(options, steps) for _ in range(runs)]
            total: int = sum(h.get_result() for h in handles)
            elapsed = time.perf_counter() - started
        finally:
            client.destroy()
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=60)
    assert total == runs * steps, f"expected {runs * steps} steps, ran {total}"
    return total / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps of the one-worker runs")
    parser.add_argument("--runs-4w", type=int, default=8, help="runs for the four-worker case")
    parser.add_argument("--steps-4w", type=int, default=500, help="steps per run in the four-worker case")
    args = parser.parse_args()

    from ironflow.testing.postgres_server import PostgresServer

    rows: list[tuple[str, str, str, str]] = []

    def row(case: str, ours: tuple[float, float] | float, peer: tuple[float, float] | float) -> float:
        """One table row; returns ironflow steps/s ÷ DBOS steps/s."""
        ms, rate = ours if isinstance(ours, tuple) else (math.nan, ours)
        peer_ms, peer_rate = peer if isinstance(peer, tuple) else (math.nan, peer)
        rows.append((case, f"{ms:.3f} / {peer_ms:.3f}", f"{rate:,.0f} / {peer_rate:,.0f}", f"{rate / peer_rate:.2f}"))
        return rate / peer_rate

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/engine.db"
        sqlite = asyncio.run(one_worker(url, args.steps))
        print("DBOS on the same SQLite file...", file=sys.stderr)
        vs_sqlite = row("sqlite, 1 worker", sqlite, dbos_one_worker(url, args.steps))
    print("starting PostgreSQL...", file=sys.stderr)
    with PostgresServer() as dsn:
        pg = asyncio.run(one_worker(dsn, args.steps))
        rate_4w = four_workers(dsn, args.runs_4w, args.steps_4w)
        print("DBOS on the same PostgreSQL server...", file=sys.stderr)
        vs_pg = row("postgresql, 1 worker", pg, dbos_one_worker(dsn, args.steps))
        vs_pg_4w = row("postgresql, 4 workers", rate_4w, dbos_four_workers(dsn, args.runs_4w, args.steps_4w))

    print(f"{'case':<24} {'p50 ms/step ironflow / DBOS':>28} {'steps/s ironflow / DBOS':>24} {'ratio':>6}")
    for case, ms, rate, ratio in rows:
        print(f"{case:<24} {ms:>28} {rate:>24} {ratio:>6}")
    print(
        f"RESULT sqlite_step_ms={sqlite[0]:.3f} pg_step_ms={pg[0]:.3f} pg_steps_per_s_4w={rate_4w:.0f} "
        f"vs_dbos_sqlite={vs_sqlite:.2f} vs_dbos_pg={vs_pg:.2f} vs_dbos_pg_4w={vs_pg_4w:.2f}"
    )


if __name__ == "__main__":
    main()
