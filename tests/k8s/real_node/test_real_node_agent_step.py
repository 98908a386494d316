"""On a real node: an agent step for real. The real Claude Code CLI in the built runner image, run
by the product's path (``K8sEphemeralProvider`` + ``StepRunner``) in a namespace enforcing Pod
Security ``restricted``, talks to the auth proxy running from its built image behind its Service
(by name), which relays to the offline model server (a pod of the worker image) as its upstream.
On runc and on RuntimeClass ``gvisor``.

What proves it: the model server answers only the Provider Account's key, which only the proxy
holds (the pod gets an ``ifap_`` token); its scripted Bash call runs inside the agent pod and the
result it sends back (read from the model server's log) shows uid 10001, no capabilities, no new
privileges, seccomp (runc) or the gVisor kernel, a read-only root and no service-account token.
Skipped when the node's binaries or the runner, auth-proxy and worker images are missing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final

import pytest
from tests.fakes import real_node_proxy as rp

from ironflow import labels
from ironflow.cluster import network, setup
from ironflow.k8s.commands.pod_runs import command_line
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(900)  # the node's start (images loaded) counts in the first test

MODEL_PORT: Final = 8085
PROBE: Final = (
    "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; "
    "if touch /probe 2>/dev/null; then echo root-writable; else echo root-read-only; fi; "
    "ls /var/run/secrets/kubernetes.io/serviceaccount 2>/dev/null || echo no-sa-token; "
    'echo "token-kind=${ANTHROPIC_AUTH_TOKEN%%_*}"; echo "api-key-set=${ANTHROPIC_API_KEY:+yes}"; '
    "cat /proc/version"
)
#: The offline model server (ironflow.fake_model) as a pod: it requires the account's key, plays
#: one Bash call then a text turn, and prints each message request's tool results to its log.
MODEL_SERVER: Final = """
import asyncio, json, os, sys
from ironflow.fake_model.server import FakeAnthropic
from ironflow.fake_model.script import Script, ToolUseTurn

async def main():
    script = Script.of(ToolUseTurn("Bash", {"command": sys.argv[1]}), "Probed.")
    fake = FakeAnthropic(script, host="0.0.0.0", port=int(sys.argv[2]), required_credential=os.environ["MODEL_KEY"])
    await fake.start()
    print("serving", flush=True)
    seen = 0
    while True:
        await asyncio.sleep(0.2)
        requests = fake.message_requests
        for r in requests[seen:]:
            print(json.dumps({"tool_results": r.tool_results()}), flush=True)
        seen = len(requests)

asyncio.run(main())
"""


def _model_objects(
    ns: str, image: str, key: Secret, bash: str = PROBE, *, server: str = MODEL_SERVER
) -> list[dict[str, Any]]:
    """The model server's Secret, Service and pod; its one Bash call runs ``bash`` (``server``: the
    script it plays, given ``bash`` and the port)."""
    argv = ["python", "-c", server, bash, str(MODEL_PORT)]
    pod = rp.sleeper_pod("fake-model", image, ns, labels={"app": "fake-model"}, command="exec " + command_line(argv))
    (container,) = pod["spec"]["containers"]
    container["env"] = [{"name": "MODEL_KEY", "valueFrom": {"secretKeyRef": {"name": "model-key", "key": "key"}}}]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "model-key", "namespace": ns},
        "data": {"key": base64.b64encode(key.reveal().encode()).decode()},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "fake-model", "namespace": ns},
        "spec": {"selector": {"app": "fake-model"}, "ports": [{"port": 80, "targetPort": MODEL_PORT}]},
    }
    return [secret, service, pod]


async def _model_serving(api: k8s.KubeApi, ns: str) -> None:
    """Wait until the offline model server in ``ns`` listens."""

    async def serving() -> bool:
        return "serving" in await api.read_log(ns, "fake-model")

    await eventually(serving, limit_s=120, interval_s=0.5, what="the offline model server serving")


def _tool_results(log: str) -> tuple[list[dict[str, Any]], str]:
    """The model server's records of each request, and the text of the one Bash call's result."""
    records = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    (tool_result,) = records[1]["tool_results"]
    content = tool_result["content"]
    return records, content if isinstance(content, str) else "\n".join(c.get("text", "") for c in content)


@contextlib.asynccontextmanager
async def model_behind_proxy(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], *, server: str = MODEL_SERVER
) -> AsyncIterator[tuple[setup.ClusterSetup, rp.ProxyInCluster, str, Secret]]:
    """Fresh namespaces, the offline model server playing ``server`` (serving), and the auth proxy
    relaying to it: the rendered setup, the proxy, the model's namespace and the account's key."""
    worker_image = need_image["worker"]
    need_image["auth-proxy"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    model_ns = f"md-{suffix}"
    key = Secret("sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex)
    with rp.cluster_namespaces(real_node, config, model_ns):
        real_node.apply_objects(_model_objects(model_ns, worker_image, key, server=server))
        proxy = rp.deploy_auth_proxy(
            real_node, config, admin_key=rp.new_admin_key(), upstream=f"http://fake-model.{model_ns}"
        )
        await _model_serving(node_api, model_ns)
        yield config, proxy, model_ns, key


def _upstream_opening(proxy_ns: str, model_ns: str, port: int = MODEL_PORT, name: str = "mirror") -> dict[str, Any]:
    """What an operator with a mirror adds: the rendered proxy egress opens only public :443."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"ironflow-auth-proxy-{name}", "namespace": proxy_ns},
        "spec": {
            "podSelector": {"matchLabels": {labels.LABEL_NAME: network.AUTH_PROXY_NAME}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": model_ns}}}],
                    "ports": [{"port": port, "protocol": "TCP"}],
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("runtime", "policies"),
    [("runc", False), ("gvisor", False), ("runc", True), ("gvisor", True)],
    ids=["runc", "gvisor", "runc-networkpolicy", "gvisor-networkpolicy"],
)
async def test_an_agent_step_runs_claude_code_through_the_proxy_in_the_cluster(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str, policies: bool
) -> None:
    """With ``policies``: under the NetworkPolicies ironflow renders (agents reach only the proxy),
    enforced before the step starts, plus the proxy's opening to its upstream here."""
    runner_image = need_image["runner"]
    async with model_behind_proxy(real_node, node_api, need_image) as (config, proxy, model_ns, key):
        if policies:
            rp.enforce_policies(real_node, [*rp.network_policies(config), _upstream_opening(proxy.namespace, model_ns)])

        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(config.namespace).auth_proxy(proxy.url)
        provider = provider.timeout(300)
        if runtime == "gvisor":
            provider = provider.runtime_class("gvisor")
        step = AgentConfig("Probe the sandbox.", allowed_tools=("Bash",)).account_lease(
            AccountLease("acct-1", "ANTHROPIC_API_KEY", key)
        )
        scoped = step.scoped(f"run-{uuid.uuid4().hex[:6]}", "probe")
        result, took = await rp.run_step(real_node, proxy, provider.settings, node_api, scoped)
        assert result.text == "Probed."
        records, output = _tool_results(await node_api.read_log(model_ns, "fake-model"))
        assert [len(r["tool_results"]) for r in records] == [0, 1], records
        lines = output.splitlines()
        fields = dict(re.findall(r"^(\w+):\s*(\S+)$", output, re.MULTILINE))  # /proc/self/status lines
        assert lines[0] == "10001", output
        assert fields["CapEff"] == "0000000000000000", output
        assert fields["NoNewPrivs"] == "1", output
        assert "root-read-only" in lines, output
        assert "no-sa-token" in lines, output
        assert "token-kind=ifap" in lines, output  # only the proxy's opaque token reached the pod
        assert "api-key-set=" in lines, output
        if runtime == "gvisor":
            assert "gvisor" in lines[-1], output  # gVisor's kernel, not the host's
        else:
            assert fields["Seccomp"] == "2", output  # RuntimeDefault
            assert "gvisor" not in lines[-1], output
        print(f"{runtime}{' under NetworkPolicies' if policies else ''}: agent step {took:.1f}s")

        async def nothing_left() -> bool:
            return not (await node_api.list(k8s.PODS, config.namespace)).items

        await eventually(nothing_left, limit_s=60, interval_s=0.5, what="the step's pod deleted")
