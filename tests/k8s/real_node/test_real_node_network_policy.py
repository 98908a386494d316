"""On a real node with kube-router's firewall: the NetworkPolicies ``ironflow manifests`` renders
(default deny, agents' DNS, agents to the proxy, the proxy's ingress) are enforced. An agent pod
reaches the auth proxy by its Service name (and its egress listener) and nothing else (a pod of
its namespace, a Service, the API server by name and by address, a pod of another namespace);
only agent pods and the worker
reach the proxy (a non-agent pod and an agent-labelled pod of another namespace do not), and only
agent pods its egress listener (the worker does not).

The same test first proves every one of those connections is open before the policies are
applied, so it fails if the policies are removed or not enforced. Allowed connections are retried
briefly (kube-router may refuse a pod's first connection while its ipsets sync: fail closed);
a refusal is never retried into a pass. Skipped when the node's binaries or the auth-proxy and
worker images are missing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from tests.fakes import real_node_proxy as rp

from ironflow.cluster import network
from ironflow.kube import api as k8s
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

SERVE = "exec python -m http.server 8080 --bind 0.0.0.0"

pytestmark = pytest.mark.timeout(600)  # the node's start (images loaded) counts in the first test


def _service(name: str, namespace: str, selector: dict[str, str]) -> dict[str, Any]:
    port = {"port": 80, "targetPort": 8080, "protocol": "TCP"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "ports": [port]},
    }


async def _proxy_answers(api: k8s.KubeApi, ns: str, pod: str, url: str, *, limit_s: float = 20.0) -> None:
    seen: list[str] = []

    async def answered() -> bool:
        seen.append(await rp.http_status(api, ns, pod, f"{url}/healthz", wait_s=3))
        return seen[-1] == "200"

    await eventually(answered, limit_s=limit_s, interval_s=0.5, what=lambda: f"{pod} -> {url} 200: {seen}")


async def _refused(api: k8s.KubeApi, ns: str, pod: str, host: str, port: int) -> str:
    """One connection attempt, never retried once it reached an address; a name lookup that
    failed (DNS is allowed) is asked again, so a refusal is one of the connection's own."""
    for _ in range(3):
        got = await rp.connect(api, ns, pod, host, port, wait_s=3)
        if got != "nodns":
            break
    return got


async def test_rendered_policies_let_an_agent_reach_the_proxy_and_nothing_else(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    need_image["auth-proxy"]
    image = need_image["worker"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    ag, wk, other = config.namespace, config.worker_namespace, f"ot-{suffix}"
    agent_labels = rp.agent_pod_labels()
    with rp.cluster_namespaces(real_node, config, other):
        proxy = rp.deploy_auth_proxy(real_node, config, admin_key=rp.new_admin_key())
        peer = rp.sleeper_pod("peer", image, ag, command=SERVE)  # PodRun's labels: not an agent
        far = rp.sleeper_pod("far", image, other, command=SERVE)
        pods = [
            rp.sleeper_pod("agent", image, ag, labels=agent_labels),
            peer,
            far,
            rp.sleeper_pod("far-agent", image, other, labels=agent_labels),
            rp.sleeper_pod("worker", image, wk, labels=rp.worker_pod_labels(config)),
            rp.sleeper_pod("not-worker", image, wk),
        ]
        real_node.apply_objects([_service("peer", ag, peer["metadata"]["labels"])])
        await rp.start_pods(node_api, pods)
        peer_ip, far_ip = await rp.pod_ip(node_api, ag, "peer"), await rp.pod_ip(node_api, other, "far")
        forbidden = {
            "a pod of its namespace": (peer_ip, 8080),
            "a Service of its namespace": (f"peer.{ag}", 80),
            "the API server by name": ("kubernetes.default", 443),
            "the API server's Service address": ("10.96.0.1", 443),
            "a pod of another namespace": (far_ip, 8080),
        }
        proxy_pod_ip = await rp.pod_ip(node_api, proxy.namespace, await rp.proxy_pod(node_api, proxy.namespace))
        strangers = {  # by address: a refusal is the proxy's ingress rule, not a name lookup's
            "a non-agent pod of the agents' namespace": (ag, "peer"),
            "a non-worker pod of the worker's namespace": (wk, "not-worker"),
            "an agent-labelled pod of another namespace": (other, "far-agent"),
        }
        egress_port = network.EGRESS_PORT  # the egress listener: agents only, never the worker
        proxy_addresses = [(proxy_pod_ip, 8080), (proxy.cluster_ip, 80), (proxy_pod_ip, egress_port)]

        # Without the policies every connection opens: the test can fail.
        for host, port in forbidden.values():
            await rp.opens(node_api, ag, "agent", host, port)
        for ns, pod in [(ag, "agent"), (wk, "worker")]:
            await _proxy_answers(node_api, ns, pod, proxy.url)
        for ns, pod in strangers.values():
            for host, port in proxy_addresses:
                await rp.opens(node_api, ns, pod, host, port)
        await rp.opens(node_api, wk, "worker", proxy_pod_ip, egress_port)

        started = time.monotonic()
        real_node.apply_objects(rp.network_policies(config))

        async def enforced() -> bool:  # kube-router syncs on the policy's event
            return await rp.connect(node_api, ag, "agent", peer_ip, 8080, wait_s=2) != "open"

        await eventually(enforced, limit_s=60, interval_s=0.5, what="kube-router to enforce the rendered policies")
        enforced_after = time.monotonic() - started

        await _proxy_answers(node_api, ag, "agent", proxy.url)
        await _proxy_answers(node_api, wk, "worker", proxy.url)
        await rp.opens(node_api, ag, "agent", proxy_pod_ip, egress_port)
        await rp.opens(node_api, ag, "agent", proxy.cluster_ip, egress_port)
        attempts = {f"agent to {what}": ("agent", ag, *where) for what, where in forbidden.items()}
        for what, (ns, pod) in strangers.items():
            for host, port in proxy_addresses:
                attempts[f"{what} to the proxy at {host}:{port}"] = (pod, ns, host, port)
        attempts["the worker to the egress listener"] = ("worker", wk, proxy_pod_ip, egress_port)
        refusals = await asyncio.gather(
            *(_refused(node_api, ns, pod, host, port) for pod, ns, host, port in attempts.values())
        )
        outcomes = dict(zip(attempts, refusals, strict=True))
        for what, got in outcomes.items():
            assert got == "timeout" or got.startswith("refused:"), f"{what}: {got}"
        # The proxy's ingress rule leaves the node's own traffic alone: kubelet's probes keep it Ready.
        assert rp.node_connects(real_node, proxy_pod_ip, 8080)
        print(f"policies enforced {enforced_after:.1f}s after apply; refusals: {outcomes}")
