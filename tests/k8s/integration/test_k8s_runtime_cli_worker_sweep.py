"""``ironflow worker`` in a worker pod (its downward-API ``IRONFLOW_WORKER_POD_*`` set) sweeps what
its earlier life left in the agents namespace before it takes runs: the process itself, against
the Kubernetes API test server in a thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ironflow import labels
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.kube import api as k8s
from ironflow.kube import owners
from ironflow.kube.owners import WorkerOwner
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"
#: The worker pod of this life and the last; another worker's pod. Not in NS: labels only.
ME = WorkerOwner("ironflow-worker-1", "11111111-1111-4111-8111-111111111111", "ironflow")
OTHER = WorkerOwner("ironflow-worker-2", "22222222-2222-4222-8222-222222222222", "ironflow")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ThreadedKube, Path]]:
    st = ThreadedKube(namespaces=("default", NS))
    (tmp_path / "kubeconfig.yaml").write_text(st.kubeconfig_yaml())
    provider = tmp_path / "provider.yaml"
    provider.write_text(f"image: busybox\nnamespace: {NS}\ncluster: {{kubeconfig: kubeconfig.yaml}}\n")
    try:
        yield st, provider
    finally:
        st.close()


def seed(st: ThreadedKube, owner: WorkerOwner | None, resource: k8s.Resource, body: dict[str, Any]) -> None:
    async def create() -> None:
        async with await k8s.KubeApi.connect(st.server.cluster_config()) as api:
            api.owner = owner
            await api.create(resource, NS, body)

    st.call(create())


def prompt_cm(name: str) -> dict[str, Any]:
    meta = {"name": name, "labels": {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: "prompt-data"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"prompt": "hi"}}


def worker(provider: Path, store: str, env: dict[str, str]) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", "from ironflow.cli.app import main; main()", "worker", "--store", store]
    return subprocess.Popen(
        [*argv, "--provider", str(provider)],
        env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def names(st: ThreadedKube, resource: k8s.Resource) -> list[str]:
    return [o["metadata"]["name"] for o in st.objects(resource, NS)]


def test_a_restarted_worker_sweeps_what_its_earlier_life_left_before_taking_runs(
    served: tuple[ThreadedKube, Path], tmp_path: Path
) -> None:
    st, provider = served
    seed(st, ME, k8s.PODS, PodRun("mine", "busybox", "true").namespace(NS).build_pod())
    seed(st, ME, k8s.CONFIGMAPS, prompt_cm("mine-prompt"))
    seed(st, OTHER, k8s.PODS, PodRun("another-workers", "busybox", "true").namespace(NS).build_pod())
    seed(st, None, k8s.PODS, PodRun("from-a-laptop", "busybox", "true").namespace(NS).build_pod())
    env = {owners.ENV_NAME: ME.name, owners.ENV_UID: ME.uid, owners.ENV_NAMESPACE: ME.namespace}
    proc = worker(provider, f"sqlite:///{tmp_path / 'engine.db'}", env)
    assert proc.stderr is not None
    head: list[str] = []
    try:  # SIGTERM only once the worker handles it: it takes runs then, after its sweep
        while not head or " worker taking runs" not in head[-1]:
            head.append(proc.stderr.readline() or "(stderr closed)")
            assert head[-1] != "(stderr closed)", "".join(head)
    finally:
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=20)[1]
    err = "".join(head) + rest
    assert proc.returncode == 0, err
    assert names(st, k8s.PODS) == ["another-workers", "from-a-laptop"]
    assert names(st, k8s.CONFIGMAPS) == []
    lines = err.splitlines()
    swept = next(i for i, line in enumerate(lines) if " swept " in line)
    taking = next(i for i, line in enumerate(lines) if " worker taking runs" in line)
    assert swept < taking
    assert lines[swept].endswith(
        f"swept 2 objects of an earlier life in {NS}: 0 jobs, 1 pods, 1 configmaps, 0 persistentvolumeclaims"
    )


def test_a_worker_pod_missing_one_variable_exits_2_with_one_line(
    served: tuple[ThreadedKube, Path], tmp_path: Path
) -> None:
    _, provider = served
    env = {owners.ENV_NAME: ME.name, owners.ENV_NAMESPACE: ME.namespace}
    proc = worker(provider, f"sqlite:///{tmp_path / 'engine.db'}", env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.startswith("error: IRONFLOW_WORKER_POD_UID unset while IRONFLOW_WORKER_POD_NAME, ")
    assert len(err.splitlines()) == 1, err
