"""The UI's runs page with 10,000 runs in the store: p50 and p95 of a GET through the real aiohttp app.

Fills a SQLite store and a PostgreSQL store (a throwaway server started here) with ``--runs``
top-level runs of two workflows in every state, each with three agent steps that carry usage,
every tenth with a sub-workflow run and its step (PostgreSQL then gets the ``VACUUM ANALYZE``
autovacuum would give it); then GETs, over loopback with one client, the first page (the 50
newest, with their totals) and a filtered page (``status=failed`` and one workflow),
``--requests`` times each, in turn with the baseline: the bare ``store.list_runs`` call of that
page on the same store, the one query the page cannot avoid.

    python benchmarks/ui.py [--runs 10000] [--requests 200]

Target: the runs page's p50 <= 100 ms on both stores. Last line: ``RESULT runs_page_p50_ms_sqlite=…
runs_page_p95_ms_sqlite=… filtered_p50_ms_sqlite=… list_runs_p50_ms_sqlite=… vs_list_runs_sqlite=…
runs_page_p50_ms_postgres=… runs_page_p95_ms_postgres=… filtered_p50_ms_postgres=…
list_runs_p50_ms_postgres=… vs_list_runs_postgres=… target_met=…`` (``vs_list_runs``: page p50 over
the bare call's p50; ``target_met``: 1 when both p50s are within the target).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import aiohttp
import asyncpg

from ironflow.engine import model
from ironflow.engine.store import Store, open_store
from ironflow.results import AgentResult
from ironflow.ui import UiSecurity, serve

TARGET_P50_MS = 100.0
WORKFLOWS = ("/srv/flows/review.py:review", "/srv/flows/fix.py:fix")
STATES = [model.RunStatus.SUCCEEDED] * 7 + [model.RunStatus.FAILED, model.RunStatus.CANCELLED, model.RunStatus.PENDING]
FILTERED = "/?status=failed&workflow=fix.py:fix"
#: How many runs are written at once (PostgreSQL's pool takes them side by side).
BATCH = 50


def _step(run_id: str, position: int) -> model.StepRecord:
    result = AgentResult("ok", 1200, cost_usd=0.0123, input_tokens=1500 + position, output_tokens=200)
    return model.StepRecord(run_id, position, f"step {position}", model.StepKind.AGENT,
                            status=model.StepStatus.SUCCEEDED, result=result, attempts=1, started_at=1.0 + position,
                            finished_at=2.0 + position)  # fmt: skip


async def _one_run(store: Store, index: int) -> None:
    run = await store.create_run(model.RunRecord(id=model.new_id(), workflow=WORKFLOWS[index % 2], input={"i": index},
                                                 status=STATES[index % len(STATES)], attempt=1))  # fmt: skip
    for position in range(3):
        await store.save_step(_step(run.id, position))
    if index % 10 == 0:
        child = await store.create_run(model.RunRecord(id=model.new_id(), workflow=WORKFLOWS[0], input={},
                                                       status=model.RunStatus.SUCCEEDED, root_run_id=run.id,
                                                       parent_run_id=run.id, attempt=1))  # fmt: skip
        await store.save_step(_step(child.id, 0))


async def fill(store: Store, runs: int) -> None:
    for start in range(0, runs, BATCH):
        await asyncio.gather(*(_one_run(store, i) for i in range(start, min(start + BATCH, runs))))


async def timed(calls: dict[str, Callable[[], Awaitable[object]]], times: int) -> dict[str, list[float]]:
    """Milliseconds of each call, ``times`` rounds of all of them in turn (so load from elsewhere falls on
    each alike), after a few rounds not counted (connections, plans, caches)."""
    for _ in range(min(5, times)):
        for call in calls.values():
            await call()
    out: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(times):
        for name, call in calls.items():
            started = time.perf_counter()
            await call()
            out[name].append((time.perf_counter() - started) * 1000)
    return out


async def settle(url: str) -> None:
    """PostgreSQL: ``VACUUM ANALYZE`` after the fill, as autovacuum does within a minute of a burst of
    writes; the planner then has the tables' statistics a running store has."""
    if url.startswith("postgresql://"):
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


async def measure(url: str, runs: int, requests: int) -> dict[str, float]:
    store = open_store(url)
    await store.open()
    try:
        started = time.perf_counter()
        await fill(store, runs)
        await settle(url)
        print(f"  filled {runs:,} runs in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        async with serve(store, UiSecurity(), host="127.0.0.1", port=0) as serving, aiohttp.ClientSession() as http:

            async def get(path: str) -> None:
                async with http.get(f"{serving.url}{path}") as response:
                    body = await response.text()
                    assert response.status == 200, body[:500]
                    assert 'class="run"' in body

            took = await timed(
                {
                    "first": lambda: get("/"),
                    "filtered": lambda: get(FILTERED),
                    "bare": lambda: store.list_runs(top_level=True, limit=51),
                },
                requests,
            )
    finally:
        await store.close()
    first, bare = took["first"], took["bare"]
    return {
        "runs_page_p50_ms": statistics.median(first),
        "runs_page_p95_ms": p(first, 95),
        "filtered_p50_ms": statistics.median(took["filtered"]),
        "list_runs_p50_ms": statistics.median(bare),
        "vs_list_runs": statistics.median(first) / statistics.median(bare),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="top-level runs in each store")
    parser.add_argument("--requests", type=int, default=200, help="GETs of each page")
    args = parser.parse_args()

    from ironflow.testing.postgres_server import PostgresServer

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        print("SQLite:", file=sys.stderr)
        results["sqlite"] = asyncio.run(measure(f"sqlite:///{tmp}/engine.db", args.runs, args.requests))
    print("starting PostgreSQL...", file=sys.stderr)
    with PostgresServer() as dsn:
        results["postgres"] = asyncio.run(measure(dsn, args.runs, args.requests))

    print(f"{'store':<10} {'page p50':>9} {'page p95':>9} {'filtered':>9} {'list_runs':>10} {'ratio':>7}  (ms)")
    for name, r in results.items():
        print(f"{name:<10} {r['runs_page_p50_ms']:>9.2f} {r['runs_page_p95_ms']:>9.2f} {r['filtered_p50_ms']:>9.2f} "
              f"{r['list_runs_p50_ms']:>10.2f} {r['vs_list_runs']:>7.1f}")  # fmt: skip
    met = all(r["runs_page_p50_ms"] <= TARGET_P50_MS for r in results.values())
    print(f"target: runs page p50 <= {TARGET_P50_MS:.0f} ms on both stores: {'met' if met else 'NOT met'}")
    fields = " ".join(f"{key}_{name}={value:.3f}" for name, r in results.items() for key, value in r.items())
    print(f"RESULT {fields} target_met={int(met)}")


if __name__ == "__main__":
    main()
