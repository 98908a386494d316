"""The engine with the Kubernetes provider on the Kubernetes API test server: real pods, real labels.

Sub-workflow pods carry the root run id so ``release_run(root)`` removes them; cancelling a
run deletes its in-flight pods. The store is SQLite (the stores have their own suite).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.engine import accounts, model
from ironflow.engine.events import Outcome
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.worker import Worker
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api
from ironflow.testing import find_leaks
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually

HERE = Path(__file__).parent
WORKFLOWS = HERE / "engine_workflows.py"
JSON_TEXT = (HERE.parents[1] / "fixtures" / "claude" / "json_text.out").read_text()
NAMESPACE = "engine"
CHILD_STEP = labels.sanitize_label_value("child step")


@pytest.fixture
async def server() -> AsyncIterator[KubeTestServer]:
    async with KubeTestServer() as srv:
        srv.create_namespace(NAMESPACE)
        srv.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
        yield srv


@pytest.fixture
async def provider(server: KubeTestServer) -> AsyncIterator[K8sEphemeralProvider]:
    async with (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
        .namespace(NAMESPACE)
        .cluster(server.cluster_config())
        .timeout(30)
    ) as made:
        yield made


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "engine.db")
    await opened.open()
    yield opened
    await opened.close()


def pods(server: KubeTestServer) -> list[dict[str, Any]]:
    return server.objects(api.PODS, NAMESPACE)


@contextlib.asynccontextmanager
async def running_worker(store: SqliteStore, provider: K8sEphemeralProvider) -> AsyncIterator[Worker]:
    worker = Worker(store, lambda run: Runner(store, provider), lease_s=1.0, poll_s=0.05)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def submit(store: SqliteStore, workflow: str, input: Any) -> str:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:{workflow}", input=input))
    return run_id


async def test_sub_workflow_pods_carry_the_root_run_id_and_release_of_the_root_removes_them(
    server: KubeTestServer, provider: K8sEphemeralProvider, store: SqliteStore
) -> None:
    server.script_pods(PodScript(labels={labels.LABEL_STEP: CHILD_STEP}, run_for=None))
    run_id = await submit(store, "parent", {})
    async with running_worker(store, provider) as worker:
        await eventually(lambda: any(p["metadata"]["labels"][labels.LABEL_STEP] == CHILD_STEP for p in pods(server)))
        (child_pod,) = pods(server)
        pod_labels = child_pod["metadata"]["labels"]
        assert pod_labels[labels.LABEL_ROOT_RUN_ID] == run_id
        child_run_id = pod_labels[labels.LABEL_RUN_ID]
        assert child_run_id != run_id
        child = await store.get_run(child_run_id)
        assert child is not None
        assert (child.parent_run_id, child.root_run_id) == (run_id, run_id)

        assert await provider.release_run(run_id) == 1
        assert pods(server) == []
        await store.cancel_run(run_id)
        await eventually(lambda: worker.outcomes)
    assert worker.outcomes[0][0] == run_id


async def test_cancelling_a_running_run_deletes_its_pod_and_releases_the_run(
    server: KubeTestServer, provider: K8sEphemeralProvider, store: SqliteStore
) -> None:
    server.script_pods(PodScript(labels={labels.LABEL_STEP: "a"}, run_for=None))
    run_id = await submit(store, "linear", {"steps": ["a", "b"]})
    async with running_worker(store, provider) as worker:
        await eventually(lambda: pods(server))
        await store.cancel_run(run_id)
        await eventually(lambda: worker.outcomes)
    assert worker.outcomes == [(run_id, Outcome.CANCELLED)]
    assert pods(server) == []
    run = await store.get_run(run_id)
    assert run is not None
    assert run.status is model.RunStatus.CANCELLED
    created = [r.name for r in server.requests if r.resource == "pods" and r.verb == "create"]
    assert len(created) == 1  # step "b" never started


async def test_a_whole_run_on_kubernetes_labels_every_pod_and_leaves_nothing(
    server: KubeTestServer, provider: K8sEphemeralProvider, store: SqliteStore
) -> None:
    run_id = await submit(store, "wave", {"names": ["lint", "tests"]})
    seen: list[dict[str, str]] = []
    original = server.script_pods(PodScript(name_prefix="claude-code", run_for=0.25, log=JSON_TEXT))
    async with running_worker(store, provider) as worker:
        while not worker.outcomes:
            seen.extend(p["metadata"]["labels"] for p in pods(server))
            await asyncio.sleep(0.02)
    server.unscript(original)
    assert worker.outcomes == [(run_id, Outcome.SUCCEEDED)]
    steps = {(d[labels.LABEL_RUN_ID], d[labels.LABEL_ROOT_RUN_ID], d[labels.LABEL_STEP]) for d in seen}
    assert steps == {(run_id, run_id, "before"), (run_id, run_id, "lint"), (run_id, run_id, "tests")}
    assert pods(server) == []


async def test_an_account_credential_is_read_from_a_kubernetes_secret_and_never_stored(
    server: KubeTestServer, store: SqliteStore
) -> None:
    token = "sk-ant-oat01-from-a-secret-0123456789"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "claude"},
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }
    async with await api.KubeApi.connect(server.cluster_config()) as kube:
        await kube.create(api.Resource("", "v1", "secrets", "Secret"), NAMESPACE, secret)
        reader = accounts.KubeSecretReader(kube, default_namespace=NAMESPACE)
        pool = accounts.AccountPool(store, [accounts.parse_account("main=secret:claude/token")], secret_reader=reader)
        session = await pool.acquire("plan")
        assert (session.account_id, session.value.reveal()) == ("main", token)
        await pool.release(session)
        missing_key = accounts.AccountPool(
            store, [accounts.parse_account("x=secret:claude/nope")], secret_reader=reader
        )
        with pytest.raises(errors.StepConfigError, match="Secret engine/claude has no key 'nope'"):
            await missing_key.acquire("plan")
        no_secret = accounts.AccountPool(store, [accounts.parse_account("x=secret:other/gone/k")], secret_reader=reader)
        with pytest.raises(errors.StepConfigError, match="Secret other/gone not found"):
            await no_secret.acquire("plan")
    assert not find_leaks([token], repr(session), *map(repr, await store.rate_limits()))
