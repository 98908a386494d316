"""On a real node, with no Cilium: an agent pod fetches from an allowed in-cluster host through the
auth proxy's egress listener and from nothing else. The real Claude Code CLI in the runner image
runs a step by the product's path (``K8sEphemeralProvider.egress`` + ``StepRunner``, the step's
egress-only token issued by the deployed proxy's admin API with the policy); the offline model
server's one Bash call runs curl in the agent pod with only the variables the provider put there.
The proxy password in the pod's ``HTTPS_PROXY`` is not its Claude token, and the model relay
refuses it (403).

Two HTTP servers stand in another namespace, behind Services whose addresses are in the fixed
deny set: the policy names the allowed one explicitly (its name, and after resolution its
Service address), never the other. Under the NetworkPolicies ``ironflow manifests`` renders, plus
the opening the proxy's rendered policy tells an operator to add for in-cluster hosts (both
servers' namespace: the proxy, not the NetworkPolicy, tells them apart), the agent gets the
allowed server's body through the proxy, the proxy's 403 for the other, and no connection to
either without the proxy. With the allow rule removed the first fetch is refused: the test fails.
"""

from __future__ import annotations

import uuid
from typing import Any, Final

import pytest
from tests.fakes import real_node_proxy as rp
from tests.k8s.real_node.test_real_node_agent_step import (
    _model_objects,
    _model_serving,
    _tool_results,
    _upstream_opening,
)

from ironflow import egress
from ironflow.k8s.commands.pod_runs import command_line
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(900)  # the node's start (images loaded) counts in the first test

SERVER_PORT: Final = 8080
#: An HTTP server answering every GET with its one word.
SERVER: Final = """
import http.server, sys
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = sys.argv[1].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("0.0.0.0", int(sys.argv[2])), Answer).serve_forever()
"""
#: Run by the agent's Bash tool: through the proxy (the pod's HTTP_PROXY), then around it.
PROBE: Final = """
for name in allowed other; do
  url="http://$name.{ns}.svc.cluster.local/"
  echo "proxied-$name=$(curl -s -m 20 -w ' %{{http_code}}' "$url" | tr '\n' ' ')"
  echo "direct-$name=$(curl -s -m 5 --noproxy '*' -o /dev/null -w '%{{http_code}}' "$url"; echo " exit=$?")"
done
echo "proxy-set=${{HTTPS_PROXY:+yes}}"
pw="${{HTTPS_PROXY#http://ironflow:}}"; pw="${{pw%%@*}}"
echo "password-kind=${{pw%%_*}} claude-token-set=${{ANTHROPIC_AUTH_TOKEN:+yes}}"
echo "password-is-claude-token=$([ "$pw" = "$ANTHROPIC_AUTH_TOKEN" ] && echo yes || echo no)"
echo "relay-with-password=$(curl -s -m 20 --noproxy '*' -w ' %{{http_code}}' -H "Authorization: Bearer $pw" \
  -H 'content-type: application/json' -d '{{"model":"m","max_tokens":1,"messages":[]}}' \
  "$ANTHROPIC_BASE_URL/v1/messages" | tr '\n' ' ')"
"""


def _server_objects(ns: str, image: str) -> list[dict[str, Any]]:
    """The two servers and their Services (port 80)."""
    docs: list[dict[str, Any]] = []
    for name in ("allowed", "other"):
        argv = ["python", "-c", SERVER, f"{name}-body", str(SERVER_PORT)]
        docs.append(rp.sleeper_pod(name, image, ns, labels={"app": name}, command="exec " + command_line(argv)))
        port = {"port": 80, "targetPort": SERVER_PORT, "protocol": "TCP"}
        meta = {"name": name, "namespace": ns}
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta,
                "spec": {"selector": {"app": name}, "ports": [port]},
            }
        )
    return docs


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_an_agent_pod_fetches_from_an_allowed_in_cluster_host_through_the_proxy_and_nothing_else(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    runner_image, worker_image = need_image["runner"], need_image["worker"]
    need_image["auth-proxy"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    model_ns, srv_ns = f"md-{suffix}", f"sv-{suffix}"
    key = Secret("sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex)
    with rp.cluster_namespaces(real_node, config, model_ns, srv_ns):
        real_node.apply_objects(_model_objects(model_ns, worker_image, key, PROBE.format(ns=srv_ns)))
        real_node.apply_objects(_server_objects(srv_ns, worker_image))
        proxy = rp.deploy_auth_proxy(
            real_node, config, admin_key=rp.new_admin_key(), upstream=f"http://fake-model.{model_ns}"
        )
        await _model_serving(node_api, model_ns)
        rp.enforce_policies(
            real_node,
            [
                *rp.network_policies(config),
                _upstream_opening(proxy.namespace, model_ns),
                _upstream_opening(proxy.namespace, srv_ns, SERVER_PORT, "in-cluster"),
            ],
        )
        allowed_ip = real_node.request("GET", f"/api/v1/namespaces/{srv_ns}/services/allowed")["spec"]["clusterIP"]
        # The Service's address is private (fixed deny): the rule names it after resolution.
        policy = egress.policy_from_options([f"allowed.{srv_ns}.svc.cluster.local:80@{allowed_ip}/32"])
        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(config.namespace).auth_proxy(proxy.url)
        provider = provider.egress(policy).timeout(300)
        if runtime == "gvisor":
            provider = provider.runtime_class("gvisor")
        step = AgentConfig("Fetch.", allowed_tools=("Bash",)).account_lease(
            AccountLease("acct-1", "ANTHROPIC_API_KEY", key)
        )
        result, took = await rp.run_step(
            real_node, proxy, provider.settings, node_api, step.scoped(f"run-{suffix}", "f")
        )
        assert result.text == "Probed."
        _, output = _tool_results(await node_api.read_log(model_ns, "fake-model"))
        seen = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
        assert seen["proxy-set"] == "yes", output
        assert seen["proxied-allowed"] == "allowed-body 200", output  # through the proxy, the server's own body
        assert seen["proxied-other"].startswith("ironflow egress: denied other."), output  # the proxy's refusal
        assert seen["proxied-other"].endswith(" 403"), output
        assert "other-body" not in output, output
        for name in ("allowed", "other"):  # around the proxy: the NetworkPolicy lets no connection open
            assert seen[f"direct-{name}"] in ("000 exit=28", "000 exit=7"), output
        # The proxy password is the step's egress-only token, not its Claude token: the model relay refuses it.
        assert seen["password-kind"] == "ifap claude-token-set=yes", output
        assert seen["password-is-claude-token"] == "no", output
        assert "this token only reaches the egress proxy" in seen["relay-with-password"], output
        assert seen["relay-with-password"].endswith(" 403"), output
        print(f"{runtime}: egress step {took:.1f}s; {seen}")
