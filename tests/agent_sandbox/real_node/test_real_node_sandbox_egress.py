"""On a real node, with no Cilium: an agent-sandbox step's pod, adopted from the warm pool, fetches
from an allowed in-cluster host through the auth proxy's egress listener and reaches nothing else.

The SandboxTemplate ``apply_template`` renders for a provider with ``egress:`` carries the egress
proxy's address (no token) and a NetworkPolicy the agent-sandbox controller enforces: kube-dns and
the proxy's pods on 8080 and 3128 only. ironflow's own agent policies are not applied here, so
the template's is the one confining the pod. The real Claude Code CLI runs the step by the
product's path (``ClaimStepRunner``, the deployed proxy's admin API as its issuer); the step's
egress-only token reaches the adopted pod over exec stdin and becomes the proxy password of the
offline model's one Bash call, curl; the decisions the proxy kept for that token join the step's
log sink when the agent is done. The servers and the probe are the k8s egress test's (``allowed``,
``other``, and ``secure`` over TLS through a ``CONNECT`` tunnel).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Final

import pytest
from tests.agent_sandbox.real_node.test_real_node_warm_pool import SETTLE_S, _running_member
from tests.fakes import real_node_proxy as rp
from tests.k8s.integration.test_k8s_runtime_steps import Lines
from tests.k8s.real_node.test_real_node_agent_step import _tool_results
from tests.k8s.real_node.test_real_node_egress import PROBE as K8S_PROBE
from tests.k8s.real_node.test_real_node_egress import Origins, model_log, origins_behind_proxy
from tests.k8s.real_node.test_real_node_session_egress import PROBE as SESSION_PROBE
from tests.k8s.real_node.test_real_node_session_egress import proxy_status

from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.claim_sessions import AgentSandboxSessions
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.egress import EgressPolicy
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import egress_delivery
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(900)  # the node's start (images loaded) counts in the first test

#: The k8s egress test's probe, then what is left of the delivered token files.
PROBE: Final = K8S_PROBE + "echo \"token-files=$(ls -A \"$HOME/.ironflow\" | tr '\\n' ' ')\"\n"


async def _template_with_egress(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, runner_image: str, found: Origins, policy: EgressPolicy
) -> AgentSandboxProvider:
    """The provider's template applied (its pods' egress ``policy``), a pool member running, and
    the template's NetworkPolicy enforced; the template holds the proxy's address only."""
    config, proxy = found.config, found.proxy
    pod = K8sEphemeralProvider.sandboxed(runner_image).namespace(config.namespace).image_pull_policy("Never")
    pod = pod.auth_proxy(proxy.url).egress(policy).timeout(300)
    provider = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(SETTLE_S)
    await provider.apply_template(node_api)
    template = provider.settings.template
    await _running_member(node_api, config.namespace)
    rp.wait_enforced(real_node, [(f"{template}-network-policy", config.namespace)])
    applied = real_node.request(
        "GET",
        f"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{config.namespace}/sandboxtemplates/{template}",
    )
    (main,) = applied["spec"]["podTemplate"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["HTTPS_PROXY"] == f"http://{proxy.url.split('://')[1].split(':')[0]}:3128", env
    assert "ifap_" not in str(applied)  # the template holds the address, never a token
    return provider


async def test_an_agent_sandbox_step_fetches_from_an_allowed_host_through_the_proxy_and_nothing_else(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    runner_image = need_image["runner"]
    async with origins_behind_proxy(
        real_node, node_api, need_image, tmp_path, probe=PROBE, agent_policies=False
    ) as found:
        proxy, model_ns = found.proxy, found.model_ns
        provider = await _template_with_egress(real_node, node_api, runner_image, found, found.policy)
        step = AgentConfig("Fetch.", allowed_tools=("Bash",)).account_lease(
            AccountLease("acct-1", "ANTHROPIC_API_KEY", found.key)
        )
        with rp.forward_into_node(real_node, proxy.cluster_ip, 80) as admin_url:
            async with AdminClient(admin_url, proxy.admin_key) as admin:
                runner = provider.runner(api=node_api, issuer=admin, worker_env={})
                sink = Lines()
                result = await runner.run(step.scoped(f"run-{uuid.uuid4().hex[:6]}", "f"), logs=sink)
        assert result.text == "Probed.", result
        notes = [line for stream, line in sink.lines if stream == "ironflow"]
        assert any(n.startswith("egress allowed allowed.") for n in notes), notes  # the deployed proxy kept them
        assert any(n.startswith("egress denied other.") for n in notes), notes
        _, output = _tool_results(await model_log(node_api, model_ns))
        seen = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
        assert seen["proxy-set"] == "yes", output
        assert seen["proxied-allowed"] == "allowed-body 200", output  # through the proxy, the server's own body
        assert seen["proxied-other"].startswith("ironflow egress: denied other."), output
        assert seen["proxied-other"].endswith(" 403"), output
        assert "other-body" not in output, output
        for name in ("allowed", "other"):  # around the proxy: the template's NetworkPolicy opens nothing
            assert seen[f"direct-{name}"] in ("000 exit=28", "000 exit=7"), output
        assert seen["https-secure"] == "secure-body 200 200", output  # a CONNECT tunnel, verified end to end
        assert seen["https-other"].split()[-1] == "403", output
        assert seen["password-kind"] == "ifap claude-token-set=yes", output  # the step's egress-only token
        assert "this token only reaches the egress proxy" in seen["relay-with-password"], output
        assert seen["password-is-claude-token"] == "no", output
        assert seen["token-files"].strip() == "", output  # both delivered files moved into the env and removed
        print(f"agent-sandbox egress step: {seen}")


async def test_an_agent_sandbox_session_opened_with_allow_host_reaches_that_host_through_the_proxy_alone(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    """A session claim adopts the template's pod; its open delivers the session's variables (the
    file the template names), its close revokes its token."""
    runner_image = need_image["runner"]
    async with origins_behind_proxy(real_node, node_api, need_image, tmp_path, agent_policies=False) as found:
        ns, proxy, srv_ns = found.config.namespace, found.proxy, found.servers_ns
        # The pod settings open only ``secure``: ``allowed`` is the session's own, given at open.
        rules = {r.host.split(".")[0]: r for r in found.policy.allow}
        template_policy, own = EgressPolicy(allow=(rules["secure"],)), EgressPolicy(allow=(rules["allowed"],))
        provider = await _template_with_egress(real_node, node_api, runner_image, found, template_policy)
        await rp.start_pods(node_api, [rp.sleeper_pod("agent", runner_image, ns, labels=rp.agent_pod_labels())])
        with rp.forward_into_node(real_node, proxy.cluster_ip, 80) as admin_url:
            async with (
                AdminClient(admin_url, proxy.admin_key) as admin,
                AgentSandboxSessions(provider.settings, api=node_api, issuer=admin) as sessions,
            ):
                sandbox = await sessions.open(OpenOptions(ttl=300, egress=own))
                ran = await sandbox.commands.run(["sh", "-c", SESSION_PROBE.format(ns=srv_ns)])
                kept = await sandbox.commands.run(["cat", egress_delivery.ENV_FILE])
                proxy_url = json.loads(kept.stdout)["HTTPS_PROXY"]
                before = await proxy_status(node_api, ns, proxy_url, srv_ns)
                await sandbox.close()
                after = await proxy_status(node_api, ns, proxy_url, srv_ns)
    seen = dict(line.split("=", 1) for line in ran.stdout.splitlines() if "=" in line)
    assert seen["proxied-allowed"] == "allowed-body 200", ran.stdout
    assert seen["proxied-other"].endswith(" 403"), ran.stdout
    for name in ("allowed", "other"):  # around the proxy: the template's NetworkPolicy opens nothing
        assert seen[f"direct-{name}"] in ("000 exit=28", "000 exit=7"), ran.stdout
    assert (before, after) == ("200", "407")
    print(f"agent-sandbox session egress: {seen}; token before close {before}, after {after}")
