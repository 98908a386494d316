"""A real worker in this process, its ``/metrics`` and ``/healthz`` scraped over HTTP on loopback.

The ``ironflow worker`` command's own test (``test_engine_worker_cli.py``) runs the same pages
in a separate process with its log lines; here the store can be closed under the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ironflow import errors
from ironflow.engine import model, monitoring
from ironflow.engine.metrics import WorkerMetrics
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.worker import Worker
from ironflow.provider import LogSink
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig
from ironflow.testing.engine import RecordingProvider
from ironflow.testing.polling import eventually

WORKFLOWS = Path(__file__).parent / "engine_workflows.py"

NOT_OPEN = "the SQLite store is not open; call `await store.open()` first"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, keyed by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


class SpendingProvider(RecordingProvider):
    """Answers as the recording provider does, with the tokens and cost a real model reports."""

    async def run(self, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
        result = await super().run(config, logs=logs)
        return dataclasses.replace(result, model="claude-test", input_tokens=120, output_tokens=30, cost_usd=0.01)


@dataclasses.dataclass
class Site:
    store: SqliteStore
    worker: Worker
    url: str
    http: aiohttp.ClientSession

    async def get(self, path: str) -> tuple[int, str]:
        async with self.http.get(self.url + path) as response:
            return response.status, await response.text()

    async def scrape(self) -> Samples:
        status, text = await self.get("/metrics")
        assert status == 200
        return samples(text)

    async def submit(self, workflow: str, input: Any) -> str:
        run = model.RunRecord(id=model.new_id(), workflow=f"{WORKFLOWS}:{workflow}", input=input, backend="local")
        return (await self.store.create_run(run)).id


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    """A worker with metrics and its pages on a free loopback port; the worker loop is not started."""
    store = SqliteStore(tmp_path / "engine.db")
    await store.open()
    metrics = WorkerMetrics()
    provider = SpendingProvider()
    worker = Worker(
        store,
        lambda run: Runner(store, provider, observers=[metrics]),
        lease_s=0.3,  # a renewal every 0.1 s: the gated step sees several
        poll_s=0.05,
        observers=[metrics],
    )
    try:
        async with (
            monitoring.serve(monitoring.create_app(worker, store, metrics), port=0) as serving,
            aiohttp.ClientSession() as http,
        ):
            yield Site(store, worker, serving.url, http)
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop=stop))
    try:
        yield
    finally:
        stop.set()
        await task


async def test_the_step_counters_move_during_a_run_and_the_histogram_counts_after(site: Site, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    first = await site.submit("gated", {"gate": str(gate)})
    await site.submit("linear", {"steps": ["plan"]})
    before = await site.scrape()
    assert value(before, "ironflow_runs_queued") == 2
    assert value(before, "ironflow_steps_started_total", backend="local", kind="op") is None
    async with running(site.worker):

        async def gated_step_running() -> Samples | None:
            found = await site.scrape()
            return found if value(found, "ironflow_steps_started_total", backend="local", kind="op") == 1 else None

        during = await eventually(gated_step_running, what="the gated step to start")
        assert value(during, "ironflow_steps_finished_total", backend="local", kind="op", outcome="succeeded") is None
        assert value(during, "ironflow_runs_queued") == 1  # concurrency 1: the second run waits
        assert value(during, "ironflow_runs_started_total", backend="local") == 1

        async def renewed() -> bool:
            return bool(value(await site.scrape(), "ironflow_lease_renewals_total"))

        await eventually(renewed, what="the worker to renew the gated run's lease")
        gate.write_text("go")
        await eventually(lambda: len(site.worker.outcomes) == 2, what="both runs to finish")
    after = await site.scrape()
    op, agent = {"backend": "local", "kind": "op"}, {"backend": "local", "kind": "agent"}
    assert value(after, "ironflow_steps_finished_total", **op, outcome="succeeded") == 1
    assert value(after, "ironflow_steps_finished_total", **agent, outcome="succeeded") == 1
    assert value(after, "ironflow_step_duration_seconds_count", **op) == 1
    assert value(after, "ironflow_step_duration_seconds_count", **agent) == 1
    assert value(after, "ironflow_runs_finished_total", backend="local", outcome="succeeded") == 2
    assert value(after, "ironflow_runs_queued") == 0
    assert value(after, "ironflow_tokens_total", model="claude-test", direction="input") == 120
    assert value(after, "ironflow_tokens_total", model="claude-test", direction="output") == 30
    assert value(after, "ironflow_cost_usd_total", model="claude-test") == 0.01
    assert value(after, "ironflow_leases_lost_total") == 0
    assert (await get_run(site.store, first)).output == "opened"


async def get_run(store: SqliteStore, run_id: str) -> model.RunRecord:
    found = await store.get_run(run_id)
    assert found is not None
    return found


async def test_healthz_is_ok_only_while_the_worker_loop_runs(site: Site) -> None:
    assert await site.get("/healthz") == (503, "worker loop is not running")
    async with running(site.worker):
        assert await site.get("/healthz") == (200, "ok")
    assert await site.get("/healthz") == (503, "worker loop is not running")


async def test_healthz_says_the_store_is_unreachable_once_it_is_closed(site: Site) -> None:
    async with running(site.worker):
        assert (await site.get("/healthz"))[0] == 200
        await site.store.close()
        status, body = await site.get("/healthz")
        assert (status, body) == (503, f"store unreachable: {NOT_OPEN}")
        assert (await site.get("/metrics"))[0] == 200  # the last counts still show
        await site.store.open()
        assert await site.get("/healthz") == (200, "ok")


class SilentStore(SqliteStore):
    """A store whose count never comes back (a database that stopped answering)."""

    async def queued_runs(self) -> int:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_healthz_gives_up_on_a_store_that_does_not_answer(tmp_path: Path) -> None:
    store = SilentStore(tmp_path / "engine.db")
    await store.open()
    worker = Worker(store, lambda run: Runner(store, RecordingProvider()), poll_s=0.05)
    app = monitoring.create_app(worker, store, WorkerMetrics(), store_check_s=0.05)
    try:
        async with monitoring.serve(app, port=0) as serving, aiohttp.ClientSession() as http, running(worker):
            response = await http.get(serving.url + "/healthz")
            assert (response.status, await response.text()) == (503, "store unreachable: no answer within 0.05s")
    finally:
        await store.close()


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


async def test_an_address_that_cannot_be_bound_is_a_config_error_naming_it(site: Site, taken_port: int) -> None:
    app = monitoring.create_app(site.worker, site.store, WorkerMetrics())
    with pytest.raises(errors.ConfigError) as caught:
        async with monitoring.serve(app, port=taken_port):
            pass
    assert caught.value.message == (
        f"cannot serve metrics on 127.0.0.1:{taken_port}: Address already in use; choose another port or address"
    )


async def test_other_paths_are_not_found(site: Site) -> None:
    assert (await site.get("/"))[0] == 404
