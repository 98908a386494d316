"""A worker killed with SIGKILL mid-run: another worker process finishes the run.

Real worker subprocesses and a real store (SQLite file or PostgreSQL), with two
providers: a recording provider that logs every call to a shared file, and the
Kubernetes provider against the in-process Kubernetes API test server, where the dead
attempt's pod really exists until the new attempt's ``release_run`` deletes it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.engine.integration.conftest import fresh_database

from ironflow import labels
from ironflow.engine import model
from ironflow.engine.store import Store, open_store
from ironflow.kube import api
from ironflow.testing.engine import read_events
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually

HERE = Path(__file__).parent
WORKER = HERE / "engine_crash_worker.py"
WORKFLOWS = HERE / "engine_workflows.py"
JSON_TEXT = (HERE.parents[1] / "fixtures" / "claude" / "json_text.out").read_text()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'engine.db'}"
        return
    yield await fresh_database(request.getfixturevalue("postgres_dsn"))


@contextmanager
def worker_process(store_url: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), store_url, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def run_status(store: Store, run_id: str) -> model.RunStatus | None:
    run = await store.get_run(run_id)
    return run.status if run is not None and run.finished else None


async def sigkill_in_step_slow(store_url: str, log: Path) -> int:
    """Start a worker, SIGKILL it once it invoked step ``slow`` (its run's lease then lapses); its pid."""
    with worker_process(store_url, str(log), "60") as first:
        await eventually(
            lambda: any(e["event"] == "invoke" and e["step"] == "slow" for e in read_events(log)),
            limit_s=20,
            interval_s=0.05,
            what="the first worker to invoke step slow",
        )
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=5)
    return first.pid


async def test_a_killed_workers_run_is_finished_by_another_without_repeating_steps(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "provider.jsonl"
    log.touch()
    store = open_store(store_url)
    await store.open()
    try:
        run_id = model.new_id()
        await store.create_run(
            model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:linear", input={"steps": ["one", "two", "slow", "four"]})
        )
        first_pid = await sigkill_in_step_slow(store_url, log)
        with worker_process(store_url, str(log), "0") as second:
            status = await eventually(
                lambda: run_status(store, run_id), limit_s=20, interval_s=0.05, what="the run to finish"
            )
            assert status is model.RunStatus.SUCCEEDED
            second_pid = second.pid
        run = await store.get_run(run_id)
        steps = await store.steps(run_id)
    finally:
        await store.close()

    assert run is not None
    assert run.output == ["done one", "done two", "done slow", "done four"]
    assert run.attempt == 2
    events = read_events(log)
    first_events = [e for e in events if e["pid"] == first_pid]
    second_events = [e for e in events if e["pid"] == second_pid]
    assert [(e["event"], e.get("step")) for e in first_events] == [
        ("release", None),
        ("invoke", "one"),
        ("finished", "one"),
        ("invoke", "two"),
        ("finished", "two"),
        ("invoke", "slow"),  # killed here: no end
    ]
    dead_pod = first_events[-1]["pod"]
    # The new attempt releases the run first, deleting the dead attempt's pod, then resumes.
    assert second_events[0] == {**second_events[0], "event": "release", "run": run_id, "deleted": [dead_pod]}
    assert [(e["event"], e.get("step")) for e in second_events[1:]] == [
        ("invoke", "slow"),
        ("finished", "slow"),
        ("invoke", "four"),
        ("finished", "four"),
    ]
    assert [(s.name, s.status, s.attempts) for s in steps] == [
        ("one", model.StepStatus.SUCCEEDED, 1),
        ("two", model.StepStatus.SUCCEEDED, 1),
        ("slow", model.StepStatus.SUCCEEDED, 1),
        ("four", model.StepStatus.SUCCEEDED, 1),
    ]


async def test_a_run_past_its_deadline_across_a_worker_sigkill_fails_once_and_runs_nothing_more(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "provider.jsonl"
    log.touch()
    store = open_store(store_url)
    await store.open()
    try:
        run_id = model.new_id()
        deadline_at = time.time() + 4
        await store.create_run(
            model.RunRecord(
                id=run_id, workflow=f"{WORKFLOWS}:linear", input={"steps": ["one", "slow", "four"]},
                deadline_at=deadline_at,
            )
        )  # fmt: skip
        first_pid = await sigkill_in_step_slow(store_url, log)
        await asyncio.sleep(max(0.0, deadline_at - time.time()) + 0.2)
        with worker_process(store_url, str(log), "0") as second:
            status = await eventually(
                lambda: run_status(store, run_id), limit_s=20, interval_s=0.05, what="the run to finish"
            )
            second_pid = second.pid
        with worker_process(store_url, str(log), "0") as third:  # a finished run is never claimed again
            await asyncio.sleep(1.0)
            third_pid = third.pid
        run = await store.get_run(run_id)
    finally:
        await store.close()

    assert status is model.RunStatus.FAILED
    assert run is not None
    assert run.error is not None
    assert run.error["type"] == "RunDeadlineExceeded"
    assert run.attempt == 2
    events = read_events(log)
    dead_pod = [e for e in events if e["pid"] == first_pid][-1]["pod"]
    # The new attempt only releases the run (the dead attempt's pod goes), and runs no step.
    assert [(e["event"], e.get("deleted")) for e in events if e["pid"] == second_pid] == [("release", [dead_pod])]
    assert [e for e in events if e["pid"] == third_pid] == []


def _step_pods(server: KubeTestServer, namespace: str, step: str) -> list[dict[str, Any]]:
    return [p for p in server.objects(api.PODS, namespace) if p["metadata"]["labels"].get(labels.LABEL_STEP) == step]


async def test_on_kubernetes_the_dead_attempts_pod_is_deleted_before_the_new_attempt_creates_any(
    store_url: str, tmp_path: Path
) -> None:
    namespace = "engine-crash"
    async with KubeTestServer() as server:
        server.create_namespace(namespace)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(server.kubeconfig_yaml(namespace=namespace))
        server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
        forever = server.script_pods(PodScript(labels={labels.LABEL_STEP: "slow"}, run_for=None))
        store = open_store(store_url)
        await store.open()
        try:
            run_id = model.new_id()
            await store.create_run(
                model.RunRecord(
                    id=run_id, workflow=f"{WORKFLOWS}:linear", input={"steps": ["one", "two", "slow", "four"]}
                )
            )
            with worker_process(store_url, "--kubeconfig", str(kubeconfig), namespace) as first:
                await eventually(
                    lambda: _step_pods(server, namespace, "slow"),
                    limit_s=20,
                    interval_s=0.05,
                    what="the pod of step slow",
                )
                os.kill(first.pid, signal.SIGKILL)
                first.wait(timeout=5)
            (dead_pod,) = _step_pods(server, namespace, "slow")
            assert dead_pod["metadata"]["labels"][labels.LABEL_RUN_ID] == run_id
            server.unscript(forever)  # the next "slow" pod finishes like the others
            resumed_from = len(server.requests)
            with worker_process(store_url, "--kubeconfig", str(kubeconfig), namespace):
                status = await eventually(
                    lambda: run_status(store, run_id), limit_s=20, interval_s=0.05, what="the run to finish"
                )
            run = await store.get_run(run_id)
        finally:
            await store.close()
        assert status is model.RunStatus.SUCCEEDED
        assert run is not None
        assert run.output == ["Hello from the fake model."] * 4
        pod_calls = [(r.verb, r.name) for r in server.requests[resumed_from:] if r.resource == "pods"]
        deletes = [i for i, (verb, _) in enumerate(pod_calls) if verb == "delete"]
        creates = [i for i, (verb, _) in enumerate(pod_calls) if verb == "create"]
        assert pod_calls[deletes[0]][1] == dead_pod["metadata"]["name"]
        assert deletes[0] < creates[0]  # released before the new attempt created anything
        assert len(creates) == 2  # "slow" again and "four": "one" and "two" are replayed
        assert server.objects(api.PODS, namespace) == []
