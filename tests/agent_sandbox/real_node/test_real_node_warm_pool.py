"""The agent-sandbox controller's warm pool on real pods: ``apply_template`` makes a SandboxWarmPool
whose member pod really runs the runner image on the real node; a step's claim adopts that running
pod (the step's command is exec'd in it through the API server and the kubelet, and its answer
comes back), the claim's deletion takes the member's pod off the node, and the pool starts a new
member that runs.

The kwok tier (``test_realkube_agent_sandbox_provider.py``) runs the exec on this host; here it
runs in the container. A step's agent is ``<claude_path> -p <prompt> …``: with ``claude_path``
``sh`` and the prompt a script mounted from a ConfigMap, the adopted pod prints real Claude Code
output in place of the CLI. Skipped when the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import agent_sandbox_gc, node_containers

from ironflow import labels
from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import K8sResources
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(480)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
SCRIPTS = "/etc/ironflow-test"
RUN = "01a0e906-1f85-7000-8000-00000000a5e1"
SETTLE_S = 120.0
SMALL = K8sResources(
    cpu_request="50m", memory_request="64Mi", ephemeral_storage_request=None, ephemeral_storage_limit=None
)


async def _running_member(api: k8s.KubeApi, ns: str, *, not_named: str = "") -> tuple[str, str]:
    """A Ready warm-pool member whose pod runs on the node: (its name, its container's id)."""

    async def member() -> tuple[str, str] | None:
        res = claims.resources()
        for sandbox in (await api.list(res.sandboxes, ns)).items:
            name = str(sandbox["metadata"]["name"])
            bound = any(r.get("kind") == "SandboxClaim" for r in sandbox["metadata"].get("ownerReferences") or [])
            if name == not_named or bound or not claims.has_condition(sandbox, "Ready"):
                continue
            for pod in (await api.list(k8s.PODS, ns)).items:
                if pod["metadata"]["name"] != name:
                    continue
                container = node_containers.running_container(pod)
                if container is not None:
                    return name, container
        return None

    found: tuple[str, str] = await eventually(member, limit_s=SETTLE_S, interval_s=0.5, what="a running pool member")
    return found


async def test_a_claim_adopts_the_warm_pools_running_pod_and_the_pool_refills(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    # The garbage collector learns the agent-sandbox kinds on its discovery pass (see agent_sandbox_gc).
    await asyncio.to_thread(agent_sandbox_gc.wait_for_claim_cascade, real_node, node_ns)
    data = {"answer.sh": f"cat {SCRIPTS}/answer.json\n", "answer.json": (FIXTURES / "json_text.out").read_text()}
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripts"}, "data": data}
    await node_api.create(k8s.CONFIGMAPS, node_ns, body)
    pod = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    pod = pod.resources(SMALL).read_only_config_map("scripts", SCRIPTS).claude_path("sh").timeout(180)
    provider = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(SETTLE_S)
    await provider.apply_template(node_api)
    member, container = await _running_member(node_api, node_ns)
    member_pod = await node_api.get(k8s.PODS, node_ns, member)
    assert member_pod["metadata"]["labels"][labels.LABEL_WARM_POOL_SANDBOX]
    assert container in await node_containers.tasks(real_node)

    execs: list[str] = []
    original = node_api.exec

    async def spy(namespace: str, name: str, command: Any, **kwargs: Any) -> Any:
        execs.append(name)
        return await original(namespace, name, command, **kwargs)

    node_api.exec = spy  # type: ignore[method-assign,assignment]
    try:
        result = await provider.runner(api=node_api, worker_env={}).run(
            AgentConfig(f"{SCRIPTS}/answer.sh").scoped(RUN, "warm")
        )
    finally:
        node_api.exec = original  # type: ignore[method-assign]

    assert result.text, result
    assert execs
    assert set(execs) == {member}, "the step ran somewhere else than the adopted member's pod"

    async def member_gone() -> bool:
        names = {p["metadata"]["name"] for p in (await node_api.list(k8s.PODS, node_ns)).items}
        claimed = (await node_api.list(claims.resources().claims, node_ns)).items
        return member not in names and not claimed and container not in await node_containers.tasks(real_node)

    await eventually(member_gone, limit_s=SETTLE_S, interval_s=0.5, what=f"the adopted pod {member} off the node")
    refill, refill_container = await _running_member(node_api, node_ns, not_named=member)
    assert refill != member
    assert refill_container in await node_containers.tasks(real_node)
