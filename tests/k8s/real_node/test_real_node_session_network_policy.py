"""On a real node with kube-router's firewall: the rendered ``ironflow-session-runtime`` policy (with
the default deny) lets only the worker's pods and the sandbox router's reach a session pod's
runtime on 8888; an agent pod of the session's namespace, a pod of the worker's namespace without
the worker's labels, and a worker-labelled pod of another namespace are refused. Every one of
those connections opens before the policies are applied, so the test fails if the policy is
removed or not enforced. Skipped when the node or the runner and worker images are missing."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from tests.fakes import real_node_proxy as rp

from ironflow import labels
from ironflow.cluster import session_network, setup
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)  # the node's start (images loaded) counts in the first test


async def test_only_the_worker_and_the_router_reach_a_session_pods_runtime(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    image, runner = need_image["worker"], need_image["runner"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    ag, wk, other, router = config.namespace, config.worker_namespace, f"ot-{suffix}", session_network.ROUTER_NAMESPACE
    worker_labels = rp.worker_pod_labels(config)
    with rp.cluster_namespaces(real_node, config, other, router):
        provider = K8sEphemeralProvider.sandboxed(runner).namespace(ag).image_pull_policy("Never")
        # By exec: this test's process is outside the node's network; the pod runs the runtime all the same.
        async with provider.sessions(api=node_api, transport="exec") as sessions:
            sandbox = await sessions.open(OpenOptions(ttl=300))
            session_ip = await rp.pod_ip(node_api, ag, sandbox.id)
            pods = [
                rp.sleeper_pod("worker", image, wk, labels=worker_labels),
                rp.sleeper_pod("router", image, router, labels={labels.LABEL_NAME: session_network.ROUTER_NAME}),
                rp.sleeper_pod("not-worker", image, wk),
                rp.sleeper_pod("agent", image, ag, labels=rp.agent_pod_labels()),
                rp.sleeper_pod("far-worker", image, other, labels=worker_labels),
            ]
            await rp.start_pods(node_api, pods)
            allowed = [(wk, "worker"), (router, "router")]
            strangers = [(wk, "not-worker"), (ag, "agent"), (other, "far-worker")]
            for ns, pod in allowed + strangers:  # without the policies every one opens: the test can fail
                await rp.opens(node_api, ns, pod, session_ip, 8888)

            policies = [d.body for d in setup.deny_all(config)]
            policies += [d.body for d in session_network.policies(ag, worker_namespace=wk)]
            real_node.apply_objects(policies)

            async def enforced() -> bool:  # kube-router syncs on the policy's event
                return await rp.connect(node_api, ag, "agent", session_ip, 8888, wait_s=2) != "open"

            await eventually(enforced, limit_s=60, interval_s=0.5, what="kube-router to enforce the session policy")
            for ns, pod in allowed:
                await rp.opens(node_api, ns, pod, session_ip, 8888)
            refusals = await asyncio.gather(
                *(rp.connect(node_api, ns, pod, session_ip, 8888, wait_s=3) for ns, pod in strangers)
            )
            for (ns, pod), got in zip(strangers, refusals, strict=True):
                assert got == "timeout" or got.startswith("refused:"), f"{ns}/{pod}: {got}"
            # The session still works by exec (the kubelet's path, not the pod network).
            assert (await sandbox.commands.run(["true"])).exit_code == 0
            await sandbox.close()
