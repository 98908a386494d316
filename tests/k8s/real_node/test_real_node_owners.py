"""On a real node: what a worker pod creates is bound to it (ironflow.kube.owners). Deleting the
worker pod takes its agent pods (their containers gone from the node), prompt ConfigMaps and Jobs
with it, by the control plane's own garbage collector; a restarted worker (the same pod, so the
same uid) sweeps what its earlier life left before it takes runs, and leaves the rest.

The worker pod is a stand-in: a real pod in the test's namespace, whose name, uid and namespace
the ironflow code on this host reads from the env the worker Deployment's downward API sets.
The real worker Deployment lives in another namespace than its agents, where only the uid label
applies (Kubernetes has no cross-namespace owners); the stand-in shares the agents' namespace so
the garbage collector's part shows. Skipped when the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.fakes import node_containers
from tests.k8s.real_node.test_real_node_cleanup import (
    HOLD,
    SCRIPTS,
    SETTLE_S,
    add_scripts,
    agent_pod,
    pods_of,
    provider,
    running,
)

from ironflow import errors, labels
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.kube import api as k8s
from ironflow.kube import owners
from ironflow.kube.owners import WorkerOwner
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(480)


async def stand_in_worker(api: k8s.KubeApi, ns: str, image: str) -> WorkerOwner:
    """A running pod no ironflow label marks, as the worker pod."""
    pod = PodRun("worker", image, HOLD).namespace(ns).restricted(read_only_root=True).build_pod()
    pod["metadata"]["labels"] = {labels.LABEL_NAME: "ironflow-worker"}
    pod["metadata"].pop("annotations", None)
    created = await api.create(k8s.PODS, ns, pod)
    return WorkerOwner("worker", created["metadata"]["uid"], ns)


def pod_env(owner: WorkerOwner) -> dict[str, str]:
    return {owners.ENV_NAME: owner.name, owners.ENV_UID: owner.uid, owners.ENV_NAMESPACE: owner.namespace}


async def in_the_worker_pod(real_node: RealNodeEnv, owner: WorkerOwner, monkeypatch: pytest.MonkeyPatch) -> k8s.KubeApi:
    """A client connected as the worker connects it, its pod's downward-API env set."""
    for key, value in pod_env(owner).items():
        monkeypatch.setenv(key, value)
    api = await k8s.KubeApi.connect(real_node.cluster_config())
    assert api.owner == owner
    return api


async def leave_objects(api: k8s.KubeApi, ns: str, image: str, run: str, prefix: str) -> list[str]:
    """What a worker's life leaves in the namespace: a running agent pod (as the product renders it),
    a running ``PodRun``, a prompt ConfigMap and a running ``JobRun``, all of ``run``; the pods' names."""
    try:
        await api.get(k8s.CONFIGMAPS, ns, "scripts")
    except errors.KubeNotFound:
        await add_scripts(api, ns)
    agent = await agent_pod(api, provider(ns, image), AgentConfig(f"{SCRIPTS}/hold.sh").scoped(run, "a"))

    def held(name: str) -> PodRun:
        return PodRun(name, image, HOLD).namespace(ns).restricted(read_only_root=True).label(labels.LABEL_RUN_ID, run)

    await api.create(k8s.PODS, ns, held(f"{prefix}-held").build_pod())
    meta = {"name": f"{prefix}-prompt", "labels": {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_RUN_ID: run}}
    await api.create(k8s.CONFIGMAPS, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}})
    job = JobRun(f"{prefix}-job", image, HOLD).namespace(ns).restricted(read_only_root=True)
    await api.create(k8s.JOBS, ns, job.label(labels.LABEL_RUN_ID, run).build_job())
    return [agent, f"{prefix}-held"]


async def of_the_run(api: k8s.KubeApi, ns: str, run: str) -> dict[str, list[str]]:
    selector = f"{labels.LABEL_RUN_ID}={run}"
    return {
        r.plural: sorted(o["metadata"]["name"] for o in (await api.list(r, ns, label_selector=selector)).items)
        for r in (k8s.PODS, k8s.CONFIGMAPS, k8s.JOBS)
    }


async def a_workers_life(
    real_node: RealNodeEnv, api: k8s.KubeApi, ns: str, image: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[WorkerOwner, str, list[str], set[str]]:
    """A stand-in worker pod, and what its life left (created as the worker creates it): the pod,
    the run id, the running pods' names and their containers on the node."""
    owner = await stand_in_worker(api, ns, image)
    run = str(uuid.uuid4())
    async with await in_the_worker_pod(real_node, owner, monkeypatch) as owned:
        pods = await leave_objects(owned, ns, image, run, "mine")
    return owner, run, pods, {await running(api, ns, name) for name in pods}


async def run_gone(api: k8s.KubeApi, ns: str, run: str, what: str) -> None:
    async def gone() -> bool:
        return await of_the_run(api, ns, run) == {"pods": [], "configmaps": [], "jobs": []}

    await eventually(gone, limit_s=SETTLE_S, interval_s=0.5, what=what)


async def test_deleting_the_worker_pod_takes_its_agent_pods_with_it(
    real_node: RealNodeEnv,
    node_ns: str,
    node_api: k8s.KubeApi,
    need_image: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = need_image["runner"]
    owner, run, pods, containers = await a_workers_life(real_node, node_api, node_ns, image, monkeypatch)
    for name in pods:
        meta = (await node_api.get(k8s.PODS, node_ns, name))["metadata"]
        assert meta["ownerReferences"] == [owner.reference()], name
    other_run = str(uuid.uuid4())
    others = await leave_objects(node_api, node_ns, image, other_run, "theirs")  # not the worker's

    await node_api.delete(k8s.PODS, node_ns, "worker", grace_period_seconds=0)

    await run_gone(node_api, node_ns, run, "the worker pod's dependents deleted")
    await node_containers.gone_from_the_node(real_node, containers)
    left = await of_the_run(node_api, node_ns, other_run)
    assert left["configmaps"] == ["theirs-prompt"]
    assert left["jobs"] == ["theirs-job"]
    assert set(others) <= set(left["pods"])


async def test_a_restarted_worker_sweeps_what_its_earlier_life_left(
    real_node: RealNodeEnv,
    node_ns: str,
    node_api: k8s.KubeApi,
    need_image: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The worker process dies, its pod lives on (a container restart keeps the uid): the next
    ``ironflow worker`` there deletes its earlier life's objects before it takes runs."""
    image = need_image["runner"]
    owner, run, _, containers = await a_workers_life(real_node, node_api, node_ns, image, monkeypatch)
    laptop = PodRun("from-a-laptop", image, HOLD).namespace(node_ns).restricted(read_only_root=True)
    await node_api.create(k8s.PODS, node_ns, laptop.build_pod())  # managed, but no worker's

    provider_file = tmp_path / "provider.yaml"
    kubeconfig = real_node.kubeconfig_path
    provider_file.write_text(f"image: {image}\nnamespace: {node_ns}\ncluster: {{kubeconfig: '{kubeconfig}'}}\n")
    argv = [sys.executable, "-c", "from ironflow.cli.app import main; main()", "worker"]
    argv += ["--store", f"sqlite:///{tmp_path / 'engine.db'}", "--provider", str(provider_file)]
    proc = await asyncio.create_subprocess_exec(
        *argv, env={**os.environ, **pod_env(owner)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    head: list[str] = []
    try:  # SIGTERM only once the worker handles it: it takes runs then, after its sweep
        async with asyncio.timeout(SETTLE_S):
            while not head or " worker taking runs" not in head[-1]:
                head.append((await proc.stderr.readline()).decode() or "(stderr closed)")
                assert head[-1] != "(stderr closed)", "".join(head)
        await run_gone(node_api, node_ns, run, "the earlier life's objects swept")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, raw = await asyncio.wait_for(proc.communicate(), 60)
    err = "".join(head) + raw.decode()
    assert proc.returncode == 0, err
    (line,) = [x for x in err.splitlines() if " swept " in x]
    assert line.endswith(
        f"swept 4 objects of an earlier life in {node_ns}: 1 jobs, 2 pods, 1 configmaps, 0 persistentvolumeclaims"
    )
    await node_containers.gone_from_the_node(real_node, containers)
    assert "from-a-laptop" in await pods_of(node_api, node_ns, labels.MANAGED_SELECTOR)
    assert (await node_api.get(k8s.PODS, node_ns, "worker"))["metadata"]["uid"] == owner.uid  # the pod lives on
