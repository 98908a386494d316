"""The engine's crash-recovery contract on a real kube-apiserver (etcd, controllers, kwok).

A worker subprocess runs a workflow of agent steps with the Kubernetes provider and is
SIGKILLed while a step's pod runs; a second worker subprocess takes the run once the lease
has expired. A watch on the namespace records every pod event with its resourceVersion, so
the order "the dead attempt's pod is gone, then the new attempt creates its first pod" is
read from the API server itself, and the pods created per step label show which steps ran
again. kwok ends each pod as its labels say (``EXIT_CODE_LABEL``, ``RUN_FOR_LABEL``), and
serves the prepared CLI output as its log. Skipped when the control plane is not built.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ironflow import labels
from ironflow.engine import model
from ironflow.engine.events import Outcome
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.store import Store, open_store
from ironflow.engine.worker import Worker
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api
from ironflow.testing.kubeenv import EXIT_CODE_LABEL, RUN_FOR_LABEL, KubeEnv
from ironflow.testing.polling import eventually
from ironflow.testing.postgres_server import fresh_database

HERE = Path(__file__).parent
WORKER = HERE / "engine_crash_worker.py"
WORKFLOWS = HERE / "engine_workflows.py"
JSON_TEXT = (HERE.parents[1] / "fixtures" / "claude" / "json_text.out").read_text()
ANSWER = "Hello from the fake model."
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
QUICK = {EXIT_CODE_LABEL: "0", RUN_FOR_LABEL: "200ms"}
#: A step killed mid-run: its pod runs as long as its worker's provider says (no run-for of
#: its own). The killed worker's pods run for an hour, so only the next attempt's release ends
#: them, however long that worker takes to start; the next worker's pods end at once.
SLOW = {EXIT_CODE_LABEL: "0"}
HELD, PROMPT = "1h", "200ms"
CHILD_STEP = labels.sanitize_label_value("child step")


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    """A fresh namespace enforcing PodSecurity ``restricted``, serving the CLI's JSON output as every log."""
    with kube_env.namespace(f"engine-crash-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        kube_env.set_namespace_log(name, JSON_TEXT)
        yield name


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A store both worker processes share: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'engine.db'}"
        return
    async with fresh_database(request.getfixturevalue("postgres_dsn"), prefix="realkube_") as url:
        yield url


@dataclass(frozen=True)
class PodEvent:
    """One watch event of a pod, as the API server ordered it."""

    type: str
    name: str
    step: str
    run_id: str
    rv: int
    phase: str
    deleting: bool


@dataclass
class PodLog:
    """Every pod event of a namespace from a watch started before the run."""

    events: list[PodEvent] = field(default_factory=list)

    def of(self, name: str) -> list[PodEvent]:
        return [e for e in self.events if e.name == name]

    def created(self) -> list[PodEvent]:
        return [e for e in self.events if e.type == "ADDED"]

    def running(self, step: str) -> PodEvent | None:
        return next((e for e in self.events if e.step == step and e.phase == "Running"), None)


@contextlib.asynccontextmanager
async def watching_pods(env: KubeEnv, namespace: str) -> AsyncIterator[PodLog]:
    """Record the namespace's pod events until the block ends. No relist on 410: a gap in the
    record would make the order unprovable, so the watch fails instead. resourceVersions are
    compared as numbers: opaque by contract, they are etcd revisions on this server."""
    log = PodLog()
    kube = await api.KubeApi.connect(env.cluster_config())
    listed = await kube.list(api.PODS, namespace)
    assert listed.items == []

    async def record() -> None:
        stream = kube.watch(api.PODS, namespace, resource_version=listed.resource_version, relist_on_gone=False)
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                meta = event.object.get("metadata", {})
                pod_labels = meta.get("labels", {})
                log.events.append(
                    PodEvent(
                        event.type,
                        meta.get("name", ""),
                        pod_labels.get(labels.LABEL_STEP, ""),
                        pod_labels.get(labels.LABEL_RUN_ID, ""),
                        int(event.resource_version),
                        event.object.get("status", {}).get("phase", ""),
                        "deletionTimestamp" in meta,
                    )
                )

    task = asyncio.create_task(record())
    try:
        yield log
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await kube.close()


@contextlib.contextmanager
def worker(
    store_url: str, kubeconfig: Path, namespace: str, stderr: Path, run_for: str
) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process running the Kubernetes provider on the kubeconfig's cluster, its pods
    running for ``run_for`` unless their step says otherwise; killed at the end (a worker keeps
    nothing of its own: the store and the cluster hold the state)."""
    argv = [sys.executable, str(WORKER), store_url, "--kubeconfig", str(kubeconfig), namespace, run_for]
    with stderr.open("ab") as err, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err) as proc:
        try:
            yield proc
        finally:
            proc.kill()  # Popen's exit then reaps it


async def finished_status(store: Store, run_id: str) -> model.RunStatus | None:
    run = await store.get_run(run_id)
    return run.status if run is not None and run.finished else None


async def pods_left(env: KubeEnv, namespace: str) -> list[str]:
    async with await api.KubeApi.connect(env.cluster_config()) as kube:
        return [p["metadata"]["name"] for p in (await kube.list(api.PODS, namespace)).items]


@dataclass(frozen=True)
class Crash:
    """What a kill-and-resume left: the run, the stored steps of every run whose pod was seen,
    the pod events, and the killed attempt's running pods (first ``Running`` event of each)."""

    run: model.RunRecord
    steps: dict[str, list[model.StepRecord]]
    pods: PodLog
    dead: tuple[PodEvent, ...]
    killed_at: int


async def kill_and_resume(
    env: KubeEnv, namespace: str, store_url: str, tmp_path: Path, workflow: str, input: Any, kill_in: tuple[str, ...]
) -> Crash:
    """Run ``workflow`` in a worker process, SIGKILL it once the pods of the steps ``kill_in`` run,
    then let a second worker process finish the run; every pod is gone when this returns."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(env.cluster_config().yaml)
    kubeconfig.chmod(0o600)
    stderr = tmp_path / "workers.err"
    store = open_store(store_url)
    await store.open()
    try:
        run_id = model.new_id()
        await store.create_run(model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:{workflow}", input=input))
        async with watching_pods(env, namespace) as pods:
            with worker(store_url, kubeconfig, namespace, stderr, HELD) as first:
                dead = await eventually(
                    lambda: all(map(pods.running, kill_in)) and tuple(map(pods.running, kill_in)),
                    limit_s=40,
                    what=f"the pods of {kill_in} to run",
                )
                os.kill(first.pid, signal.SIGKILL)
                first.wait(timeout=5)
            killed_at = len(pods.events)
            with worker(store_url, kubeconfig, namespace, stderr, PROMPT):
                status = await eventually(
                    lambda: finished_status(store, run_id),
                    limit_s=40,
                    what=lambda: f"the run to finish; workers said:\n{stderr.read_text()}",
                )
            await eventually(
                lambda: all(pods.of(e.name)[-1].type == "DELETED" for e in pods.created()),
                limit_s=40,
                what="every pod to go",
            )
        run = await store.get_run(run_id)
        steps = {r: await store.steps(r) for r in {run_id, *(e.run_id for e in pods.created())}}
    finally:
        await store.close()
    assert status is model.RunStatus.SUCCEEDED, stderr.read_text()
    assert run is not None
    assert await pods_left(env, namespace) == []
    return Crash(run, steps, pods, dead, killed_at)


def assert_released_before_resumed(crash: Crash) -> list[PodEvent]:
    """The dead attempt's pods still ran after the kill; their deletions and their ends precede
    (by resourceVersion) the first pod of the new attempt. Returns the new attempt's creations."""
    last_dead = max(d.rv for d in crash.dead)
    resumed = [e for e in crash.pods.created() if e.rv > last_dead]
    assert resumed, "the new attempt created no pod"
    for dead in crash.dead:
        dead_events = crash.pods.of(dead.name)
        assert {e.phase for e in dead_events if e.rv >= dead.rv} == {"Running"}  # only the release ended it
        (deletion_requested, *_) = [e for e in dead_events if e.deleting]
        gone = dead_events[-1]
        assert gone.type == "DELETED"
        assert deletion_requested.rv < gone.rv < resumed[0].rv
    assert all(e.rv < resumed[0].rv for e in crash.pods.events[: crash.killed_at])
    return resumed


async def test_a_killed_worker_s_run_resumes_after_its_pod_is_gone_without_repeating_steps(
    kube_env: KubeEnv, ns: str, store_url: str, tmp_path: Path
) -> None:
    """SIGKILL while step "slow"'s pod runs: the next worker deletes that pod (and waits for it to
    be gone) before it creates any, then runs only "slow" again and "four"; the run succeeds."""
    steps = ["one", "two", "slow", "four"]
    pod_labels = {name: SLOW if name == "slow" else QUICK for name in steps}
    crash = await kill_and_resume(
        kube_env, ns, store_url, tmp_path, "linear", {"steps": steps, "pod_labels": pod_labels}, ("slow",)
    )
    run_id = crash.run.id
    assert (crash.run.output, crash.run.attempt) == ([ANSWER] * 4, 2)
    assert [(s.name, s.status, s.attempts) for s in crash.steps[run_id]] == [
        (name, model.StepStatus.SUCCEEDED, 1) for name in steps
    ]
    assert [d.run_id for d in crash.dead] == [run_id]
    resumed = assert_released_before_resumed(crash)
    assert [e.step for e in resumed] == ["slow", "four"]
    assert Counter(e.step for e in crash.pods.created()) == {"one": 1, "two": 1, "slow": 2, "four": 1}
    assert {e.run_id for e in crash.pods.created()} == {run_id}


async def test_a_killed_worker_s_sub_workflow_pod_is_released_through_the_root_run(
    kube_env: KubeEnv, ns: str, tmp_path: Path
) -> None:
    """SIGKILL while the child run's step runs: the resumed parent's ``release_run(root)`` deletes the
    child's pod (it carries the root's id), "plan" is not run again, the child step is; success."""
    pod_labels = {"plan": QUICK, "child step": SLOW}
    crash = await kill_and_resume(
        kube_env,
        ns,
        f"sqlite:///{tmp_path / 'engine.db'}",
        tmp_path,
        "parent",
        {"pod_labels": pod_labels},
        (CHILD_STEP,),
    )
    run_id = crash.run.id
    (child_run_id,) = (d.run_id for d in crash.dead)
    assert child_run_id != run_id
    assert crash.run.attempt == 2
    assert crash.run.output is not None
    assert crash.run.output["text"] == ANSWER
    assert (crash.run.output["run_id"], crash.run.output["root"], crash.run.output["parent"]) == (
        child_run_id,
        run_id,
        run_id,
    )
    resumed = assert_released_before_resumed(crash)
    assert [(e.step, e.run_id) for e in resumed] == [(CHILD_STEP, child_run_id)]
    assert Counter(e.step for e in crash.pods.created()) == {"plan": 1, CHILD_STEP: 2}
    assert [(s.name, s.status, s.attempts) for s in crash.steps[run_id]] == [
        ("plan", model.StepStatus.SUCCEEDED, 1),
        ("child", model.StepStatus.SUCCEEDED, 1),
    ]
    assert [(s.name, s.status, s.attempts) for s in crash.steps[child_run_id]] == [
        ("child step", model.StepStatus.SUCCEEDED, 1)  # resumed, not retried: still one attempt
    ]


async def test_a_killed_worker_s_parallel_wave_is_released_whole_and_run_again(
    kube_env: KubeEnv, ns: str, tmp_path: Path
) -> None:
    """SIGKILL while both pods of a wave run: the next attempt deletes both (and waits for both to
    go) before creating any; "before" is not run again, the wave is; success."""
    pod_labels = {"before": QUICK, "lint": SLOW, "tests": SLOW}
    crash = await kill_and_resume(
        kube_env,
        ns,
        f"sqlite:///{tmp_path / 'engine.db'}",
        tmp_path,
        "wave",
        {"names": ["lint", "tests"], "pod_labels": pod_labels},
        ("lint", "tests"),
    )
    assert (crash.run.output, crash.run.attempt) == ([ANSWER] * 2, 2)
    resumed = assert_released_before_resumed(crash)
    assert sorted(e.step for e in resumed) == ["lint", "tests"]
    assert Counter(e.step for e in crash.pods.created()) == {"before": 1, "lint": 2, "tests": 2}
    assert [(s.name, s.status, s.attempts) for s in crash.steps[crash.run.id]] == [
        ("before", model.StepStatus.SUCCEEDED, 1),
        ("lint", model.StepStatus.SUCCEEDED, 1),
        ("tests", model.StepStatus.SUCCEEDED, 1),
    ]


async def test_sub_workflow_pods_carry_the_root_run_id_and_release_of_the_root_removes_them(
    kube_env: KubeEnv, ns: str, tmp_path: Path
) -> None:
    """The child run's pod is labelled with its own run id and the parent's root id; on the real
    server ``release_run(root)`` deletes it and returns only once it is gone."""
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace(ns).timeout(60).cluster(kube_env.cluster_config())
    store = SqliteStore(tmp_path / "engine.db")
    await store.open()
    try:
        run_id = model.new_id()
        pod_labels = {"plan": QUICK, "child step": {EXIT_CODE_LABEL: "0", RUN_FOR_LABEL: "60s"}}
        await store.create_run(
            model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:parent", input={"pod_labels": pod_labels})
        )
        running = Worker(store, lambda run: Runner(store, provider), lease_s=3.0)
        async with watching_pods(kube_env, ns) as pods, asyncio.TaskGroup() as tasks:
            execution = tasks.create_task(running.run_once())
            child_pod = await eventually(
                lambda: pods.running(CHILD_STEP), limit_s=40, what="the child step's pod to run"
            )
            child = await store.get_run(child_pod.run_id)
            assert child is not None
            assert (child.parent_run_id, child.root_run_id) == (run_id, run_id)
            async with await api.KubeApi.connect(kube_env.cluster_config()) as kube:
                live = await kube.get(api.PODS, ns, child_pod.name)
            assert live["metadata"]["labels"][labels.LABEL_ROOT_RUN_ID] == run_id
            assert child_pod.run_id != run_id

            assert await provider.release_run(run_id) == 1
            assert await pods_left(kube_env, ns) == []  # gone when release_run returned
            async with asyncio.timeout(30):
                assert await execution
        # Released under a live execution, the in-flight step loses its pod: it fails, naming it.
        assert running.outcomes == [(run_id, Outcome.FAILED)]
        (child_step,) = await store.steps(child_pod.run_id)
    finally:
        await provider.aclose()
        await store.close()
    assert child_step.error is not None
    assert child_step.error["type"] == "KubeNotFound"
    assert f"{child_pod.name} (Pod) was deleted while waiting for it" in child_step.error["message"]
    assert Counter(e.step for e in pods.created()) == {"plan": 1, CHILD_STEP: 1}
