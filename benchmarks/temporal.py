"""Per-step overhead of ironflow on Temporal against the built-in engine on PostgreSQL.

The same workflow both ways: ``--steps`` sequential agent steps on a provider that answers at
once (no sandbox), so what is timed is what the orchestration adds per step. The engine runs
it with one in-process worker on a throwaway PostgreSQL server; Temporal with one in-process
worker (``ironflow.temporal``) on a throwaway ``temporal server start-dev`` (SQLite), both on
this machine, in this one run. Each side does a short warm-up run first.

    python benchmarks/temporal.py [--steps 200]

The same worker also runs a bare Temporal activity in a row (no ironflow), so the ratio splits
into what Temporal itself costs here and what ironflow adds on top. Target: Temporal ≤ 5× the
engine's per-step time. Last line:
``RESULT engine_pg_step_ms=… temporal_step_ms=… temporal_bare_step_ms=… ratio=…``. Needs PostgreSQL and the Temporal CLI
(``scripts/temporal-cli build``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

import ironflow.temporal as ift
from ironflow.provider import ProviderBase
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig

HERE = Path(__file__).resolve()
WARM_UP_STEPS = 5
#: Neither side fsyncs: the test PostgreSQL runs with fsync=off, the dev server's SQLite so.
NO_FSYNC = ("journal_mode=wal", "synchronous=off")


class InstantProvider(ProviderBase):
    """Answers every agent step at once: the step's cost is the orchestration's alone."""

    async def run(self, config: AgentConfig, *, logs: Any = None) -> AgentResult:
        return AgentResult(value="ok", duration_ms=0)

    async def release_run(self, run_id: str) -> int:
        return 0

    def account_kind(self) -> str | None:
        return None


async def agents(ctx: Any, input: dict[str, Any]) -> int:
    """The engine's workflow: ``input["steps"]`` agent steps in a row."""
    for i in range(input["steps"]):
        await ctx.agent(f"step-{i}", AgentConfig("noop"))
    return int(input["steps"])


@activity.defn(name="bench.noop")
async def noop(index: int) -> int:
    """A bare activity: the Temporal baseline without ironflow."""
    return index


@workflow.defn(name="Bare")
class Bare:
    """``input["steps"]`` bare activities in a row: what Temporal alone costs per step here."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> int:
        for i in range(input["steps"]):
            await workflow.execute_activity("bench.noop", i, start_to_close_timeout=timedelta(seconds=60))
        return int(input["steps"])


@workflow.defn(name="Agents")
class Agents:
    """The same workflow on Temporal."""

    @workflow.run
    async def run(self, input: dict[str, Any]) -> int:
        async with ift.run() as ctx:
            for i in range(input["steps"]):
                await ctx.agent(f"step-{i}", AgentConfig("noop"))
        return int(input["steps"])


async def engine_step_ms(dsn: str, steps: int) -> float:
    """Mean ms per step of one engine run of ``steps`` steps (after a warm-up run)."""
    from ironflow.engine import Runner, Worker, model, open_store

    store = open_store(dsn)
    await store.open()
    provider = InstantProvider()
    ref = f"{HERE}:agents"
    try:
        timings: list[float] = []
        for count in (WARM_UP_STEPS, steps):
            await store.create_run(model.RunRecord(id=model.new_id(), workflow=ref, input={"steps": count}))
            started = time.perf_counter()
            await Worker(store, lambda run: Runner(store, provider)).run(until_idle=True)
            timings.append((time.perf_counter() - started) / count)
        return timings[-1] * 1000
    finally:
        await store.close()


async def temporal_step_ms(address: str, steps: int) -> tuple[float, float]:
    """Mean ms per step of the ironflow workflow and of the bare one on Temporal, each after a
    warm-up workflow, on one worker (ironflow's activities beside the bare one)."""
    from ironflow.temporal.worker import connect

    client = await connect(address)
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    workflows = ift.load_workflows(str(HERE))
    loaded = sys.modules[workflows[0].__module__]  # this file, as the worker loaded it
    worker = ift.build_worker(
        client, task_queue=queue, provider=InstantProvider(), workflows=workflows, more_activities=[loaded.noop]
    )
    per_step: dict[str, float] = {}
    async with worker:
        for name in ("Agents", "Bare"):
            for count in (WARM_UP_STEPS, steps):
                started = time.perf_counter()
                done = await client.execute_workflow(
                    name, {"steps": count}, id=f"bench-{uuid.uuid4().hex}", task_queue=queue
                )
                per_step[name] = (time.perf_counter() - started) / count * 1000
                assert done == count
    return per_step["Agents"], per_step["Bare"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="agent steps per run")
    args = parser.parse_args()

    from ironflow.testing.postgres_server import PostgresServer
    from ironflow.testing.temporal_server import TemporalDevServer

    print("starting PostgreSQL...", file=sys.stderr)
    with PostgresServer() as dsn:
        engine_ms = asyncio.run(engine_step_ms(dsn, args.steps))
    print("starting the Temporal dev server...", file=sys.stderr)
    with (
        tempfile.TemporaryDirectory() as tmp,
        TemporalDevServer(db_file=Path(tmp) / "temporal.db", sqlite_pragmas=NO_FSYNC) as server,
    ):
        temporal_ms, bare_ms = asyncio.run(temporal_step_ms(server.address, args.steps))
    ratio = temporal_ms / engine_ms
    print(f"{'case':<40} {'ms/step':>10}")
    print(f"{'engine, PostgreSQL, 1 worker':<40} {engine_ms:>10.3f}")
    print(f"{'ironflow on Temporal dev server, 1 worker':<40} {temporal_ms:>10.3f}")
    print(f"{'bare Temporal activity, same worker':<40} {bare_ms:>10.3f}")
    print(f"Temporal / engine: {ratio:.2f}x (target <= 5x); bare Temporal / engine: {bare_ms / engine_ms:.2f}x")
    print(
        f"RESULT engine_pg_step_ms={engine_ms:.3f} temporal_step_ms={temporal_ms:.3f} "
        f"temporal_bare_step_ms={bare_ms:.3f} ratio={ratio:.2f}"
    )


if __name__ == "__main__":
    main()
