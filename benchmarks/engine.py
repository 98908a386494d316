"""Durable no-op steps: steps per second and p50 engine overhead per step.

Each step is ``await ctx.op(name, noop)``: the time measured is what the engine adds
(record the step as running, run it, record its result). Cases: SQLite with one worker,
PostgreSQL (a throwaway server started here) with one worker and with four worker
processes sharing the queue.

    python benchmarks/engine.py [--steps 2000] [--runs-4w 8]

Targets: <= 0.5 ms/step on SQLite, <= 2 ms/step on PostgreSQL, >= 1,000 steps/s with
four workers on PostgreSQL. Last line: ``RESULT sqlite_step_ms=… pg_step_ms=… pg_steps_per_s_4w=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps of the one-worker runs")
    parser.add_argument("--runs-4w", type=int, default=8, help="runs for the four-worker case")
    parser.add_argument("--steps-4w", type=int, default=500, help="steps per run in the four-worker case")
    args = parser.parse_args()

    from ironflow.testing.postgres import PostgresServer

    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_ms, sqlite_rate = asyncio.run(one_worker(f"sqlite:///{tmp}/engine.db", args.steps))
        rows.append(("sqlite, 1 worker", f"{sqlite_ms:.3f}", f"{sqlite_rate:,.0f}"))
    print("starting PostgreSQL...", file=sys.stderr)
    with PostgresServer() as dsn:
        pg_ms, pg_rate = asyncio.run(one_worker(dsn, args.steps))
        rows.append(("postgresql, 1 worker", f"{pg_ms:.3f}", f"{pg_rate:,.0f}"))
        rate_4w = four_workers(dsn, args.runs_4w, args.steps_4w)
        rows.append(("postgresql, 4 workers", "-", f"{rate_4w:,.0f}"))

    print(f"{'case':<24} {'p50 ms/step':>12} {'steps/s':>10}")
    for case, ms, rate in rows:
        print(f"{case:<24} {ms:>12} {rate:>10}")
    print(f"RESULT sqlite_step_ms={sqlite_ms:.3f} pg_step_ms={pg_ms:.3f} pg_steps_per_s_4w={rate_4w:.0f}")


if __name__ == "__main__":
    main()
