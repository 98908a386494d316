"""On a real node with kube-router's firewall: a ``PodUp`` service pod for a run. ``start()`` returns
once the kubelet's readiness probe passes (also under the rendered default deny), an agent pod
reaches the service on its declared port under the NetworkPolicies ``ironflow manifests`` renders,
and nothing else does (an undeclared port of the same pod, a non-agent pod of the run, an
agent-labelled pod of another namespace); ``release_run``'s selection deletes it with the run.

Every connection is first shown open before the policies, so the test fails if they are not
enforced. What the static policies cannot do, and this test records without asserting: an agent
pod of another run in the same namespace reaches the service too (the worker may not write
per-run policies; see ``ironflow.cluster.service_network``). Skipped when the node's binaries or
the worker image are missing.
"""

from __future__ import annotations

import uuid
from typing import Final

import pytest
from tests.fakes import real_node_proxy as rp

from ironflow import labels
from ironflow.cluster import setup
from ironflow.k8s import cleanup
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.commands.pod_ups import PodUp, Readiness
from ironflow.kube import api as k8s
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)  # the node's start (images loaded) counts in the first test

DECLARED: Final = 8080
UNDECLARED: Final = 8081
#: Two listeners in one container: only the first port is declared.
SERVE: Final = (
    f"python -m http.server {UNDECLARED} --bind 0.0.0.0 & exec python -m http.server {DECLARED} --bind 0.0.0.0"
)


def _service(name: str, image: str, ns: str, run: str) -> PodUp:
    up = PodUp(name, image, run).namespace(ns).command("/bin/sh", "-c", SERVE)
    return up.port(DECLARED).readiness(Readiness.tcp(DECLARED)).start_timeout(180)


async def test_a_service_pod_is_ready_reached_by_agents_only_and_released_with_its_run(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    image = need_image["worker"]  # python for the listeners and the probes
    suffix = uuid.uuid4().hex[:6]
    # No proxy: the direct variant's policies (its agents' egress is not what this test is about).
    config = setup.ClusterSetup(f"ag-{suffix}", f"wk-{suffix}", presets=(), egress_profiles=())
    ag, other = config.namespace, f"ot-{suffix}"
    run, other_run = f"run-{suffix}", f"other-{suffix}"
    agent = {**rp.agent_pod_labels(), labels.LABEL_RUN_ID: run}
    podrun = {**PodRun("peer", image, "sleep").object_labels(), labels.LABEL_RUN_ID: run}  # a PodRun of the run
    with rp.cluster_namespaces(real_node, config, other):
        service = await _service("db", image, ag, run).start(node_api)
        assert service.ip
        pods = [
            rp.sleeper_pod("agent", image, ag, labels=agent),
            rp.sleeper_pod("agent-other-run", image, ag, labels={**agent, labels.LABEL_RUN_ID: other_run}),
            rp.sleeper_pod("peer", image, ag, labels=podrun),
            rp.sleeper_pod("far-agent", image, other, labels=agent),
        ]
        await rp.start_pods(node_api, pods)
        attempts = {
            "the run's agent to the declared port": ("agent", ag, DECLARED),
            "the run's agent to an undeclared port": ("agent", ag, UNDECLARED),
            "a PodRun of the run to the declared port": ("peer", ag, DECLARED),
            "an agent-labelled pod of another namespace": ("far-agent", other, DECLARED),
            "an agent of another run": ("agent-other-run", ag, DECLARED),
        }
        # Without the policies every connection opens: the test can fail.
        for pod, ns, port in attempts.values():
            await rp.opens(node_api, ns, pod, service.ip, port)

        rp.enforce_policies(real_node, rp.network_policies(config))
        await rp.opens(node_api, ag, "agent", service.ip, DECLARED)
        outcomes = {}
        for what, (pod, ns, port) in attempts.items():
            if pod != "agent" or port != DECLARED:
                outcomes[what] = await rp.connect(node_api, ns, pod, service.ip, port, wait_s=3)
        other_run_reached = outcomes.pop("an agent of another run")
        for what, got in outcomes.items():
            assert got == "timeout" or got.startswith("refused:"), f"{what}: {got}"
        print(f"an agent of another run, same namespace: {other_run_reached} (static policies: not per run)")

        # Under the default deny the kubelet's readiness probe still reaches a new service pod.
        second = await _service("cache", image, ag, run).start(node_api)
        await rp.opens(node_api, ag, "agent", second.ip, DECLARED)

        released = await cleanup.delete_and_wait(node_api, ag, cleanup.run_selection(run), 120)
        assert released == 4  # the two service pods, the agent and the PodRun of the run
        left = sorted(p["metadata"]["name"] for p in (await node_api.list(k8s.PODS, ag)).items)
        assert left == ["agent-other-run"]
