"""A Temporal worker SIGKILLed while a step's pod runs, on the real kube-apiserver (etcd,
controllers, kwok) and the real Temporal dev server: the next worker finishes the run.

The Kubernetes provider runs each step's pod; kwok ends each as its labels say and serves the
prepared CLI output as its log. The first worker process is killed while step "slow"'s pod
runs; its heartbeat times out and Temporal retries the step on a second worker process, whose
attempt deletes the dead attempt's pod (found by the step's labels) and waits until it is gone
before it creates its own. A watch on the namespace records every pod event with its
resourceVersion, so that order is read from the API server itself, as the engine's crash test
reads it. Skipped when the control plane or the Temporal CLI is not built.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from tests.engine.integration.test_realkube_engine_crash import (
    JSON_TEXT,
    QUICK,
    RESTRICTED,
    pods_left,
    watching_pods,
)
from tests.temporal.integration.watching import started_attempts, worker_process

from ironflow.testing.kubeenv import EXIT_CODE_LABEL, KubeEnv
from ironflow.testing.polling import eventually
from ironflow.testing.temporal_server import TemporalDevServer

#: How soon the killed worker's attempt is given up. At 2 s, under load (a CPU hog, load 7), the
#: live worker's own attempt of "slow" missed a heartbeat once and ran a third time.
HEARTBEAT_S = 5
pytestmark = pytest.mark.timeout(240)

WORKER = Path(__file__).parent / "temporal_worker.py"
ANSWER = "Hello from the fake model."
#: A step killed mid-run: its pod runs as long as its worker's provider says (no run-for of its
#: own). The killed worker's pods run for an hour, so only the next attempt's release ends them,
#: however long the next worker takes to start; the next worker's pods end at once.
SLOW = {EXIT_CODE_LABEL: "0"}


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"temporal-crash-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        kube_env.set_namespace_log(name, JSON_TEXT)
        yield name


async def test_a_killed_worker_s_step_pod_is_deleted_before_the_next_attempt_creates_one(
    kube_env: KubeEnv, ns: str, temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    names = ["one", "two", "slow", "four"]
    steps = [{"name": n, "prompt": f"do {n}", "pod_labels": SLOW if n == "slow" else QUICK} for n in names]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube_env.cluster_config().yaml)
    kubeconfig.chmod(0o600)
    queue = f"crash-{uuid.uuid4().hex[:8]}"
    stderr = tmp_path / "workers.err"
    events = tmp_path / "events.jsonl"
    argv = [sys.executable, str(WORKER), temporal_server.address, queue, str(events), "k8s", str(kubeconfig), ns]
    held, prompt = [*argv, "1h"], [*argv, "200ms"]
    client = await Client.connect(temporal_server.address)
    async with watching_pods(kube_env, ns) as pods:
        with worker_process(held, stderr) as first:
            handle = await client.start_workflow(
                "Linear", {"steps": steps, "heartbeat_s": HEARTBEAT_S}, id="crash-k8s", task_queue=queue
            )
            dead = await eventually(lambda: pods.running("slow"), limit_s=60, what="step slow's pod to run")
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=5)
        killed_at = len(pods.events)
        with worker_process(prompt, stderr):
            output = await handle.result()
        await eventually(
            lambda: all(pods.of(e.name)[-1].type == "DELETED" for e in pods.created()),
            limit_s=40,
            what="every pod to go",
        )
    assert output == [ANSWER] * 4, stderr.read_text()
    # The dead attempt's pod ran on after the kill; only the next attempt's release ended it,
    # and it was gone (by resourceVersion) before that attempt created its pod.
    dead_events = pods.of(dead.name)
    assert {e.phase for e in dead_events if e.rv >= dead.rv} == {"Running"}
    (deletion_requested, *_) = [e for e in dead_events if e.deleting]
    gone = dead_events[-1]
    resumed = [e for e in pods.created() if e.rv > dead.rv]
    assert [e.step for e in resumed] == ["slow", "four"]
    assert gone.type == "DELETED"
    assert deletion_requested.rv < gone.rv < resumed[0].rv
    assert all(e.rv < resumed[0].rv for e in pods.events[:killed_at])
    assert Counter(e.step for e in pods.created()) == {"one": 1, "two": 1, "slow": 2, "four": 1}
    assert {e.run_id for e in pods.created()} == {"crash-k8s"}
    assert await started_attempts(client, "crash-k8s") == [
        ("ironflow.release_run", 1), ("one", 1), ("two", 1), ("slow", 2), ("four", 1),
    ]  # fmt: skip
    assert await pods_left(kube_env, ns) == []
