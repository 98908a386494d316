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
A third server, ``secure``, answers over TLS with a certificate of a test CA for its Service name:
curl in the agent pod fetches it through a ``CONNECT`` tunnel, verifying it with ``--cacert``,
while a tunnel to the other host is refused with 403.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from tests.fakes import real_node_proxy as rp
from tests.fakes.tls_origin import make_tls
from tests.k8s.real_node.test_real_node_agent_step import (
    _model_objects,
    _model_serving,
    _tool_results,
    _upstream_opening,
)

from ironflow import egress
from ironflow.cluster import setup
from ironflow.egress import EgressPolicy
from ironflow.k8s.commands.pod_runs import command_line
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.polling import eventually
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
printf '%s\n' '{ca}' > "$HOME/test-ca.pem"
for name in secure other; do
  echo "https-$name=$(curl -s -m 20 --cacert "$HOME/test-ca.pem" -w ' %{{http_code}} %{{http_connect}}' \
    "https://$name.{ns}.svc.cluster.local/" 2>&1 | tr '\n' ' ')"
done
"""
TLS_PORT: Final = 8443
#: The same server over TLS, its pair from the mounted Secret.
TLS_SERVER: Final = SERVER.replace(
    'http.server.HTTPServer(("0.0.0.0", int(sys.argv[2])), Answer).serve_forever()',
    "import ssl\n"
    'server = http.server.HTTPServer(("0.0.0.0", int(sys.argv[2])), Answer)\n'
    "tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
    'tls.load_cert_chain("/tls/tls.crt", "/tls/tls.key")\n'
    "server.socket = tls.wrap_socket(server.socket, server_side=True)\n"
    "server.serve_forever()",
)


def _service(ns: str, name: str, port: int, target: int) -> dict[str, Any]:
    ports = [{"port": port, "targetPort": target, "protocol": "TCP"}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"app": name}, "ports": ports}}  # fmt: skip


def _server_objects(ns: str, image: str, tls: Path) -> list[dict[str, Any]]:
    """The two plain servers (Services on port 80), and ``secure`` over TLS (443) with the test
    CA's pair for its Service name (``cert.pem`` and ``key.pem`` under ``tls``), from a Secret."""
    docs: list[dict[str, Any]] = []
    for name in ("allowed", "other"):
        argv = ["python", "-c", SERVER, f"{name}-body", str(SERVER_PORT)]
        docs.append(rp.sleeper_pod(name, image, ns, labels={"app": name}, command="exec " + command_line(argv)))
        docs.append(_service(ns, name, 80, SERVER_PORT))
    pair = {"tls.crt": (tls / "cert.pem").read_text(), "tls.key": (tls / "key.pem").read_text()}
    docs.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                 "metadata": {"name": "secure-tls", "namespace": ns}, "stringData": pair})  # fmt: skip
    argv = ["python", "-c", TLS_SERVER, "secure-body", str(TLS_PORT)]
    pod = rp.sleeper_pod("secure", image, ns, labels={"app": "secure"}, command="exec " + command_line(argv))
    pod["spec"]["volumes"] = [{"name": "tls", "secret": {"secretName": "secure-tls"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "tls", "mountPath": "/tls", "readOnly": True}]
    docs += [pod, _service(ns, "secure", 443, TLS_PORT)]
    return docs


async def model_log(api: k8s.KubeApi, ns: str) -> str:
    """The model server's log once it holds both requests' records (it writes them every 0.2 s:
    a step may end before the second is out)."""

    async def both() -> str | None:
        log = await api.read_log(ns, "fake-model")
        return log if log.count('{"tool_results"') >= 2 else None

    found: str = await eventually(both, limit_s=10, interval_s=0.2, what="the model server's second record")
    return found


@dataclass(frozen=True)
class Origins:
    """What :func:`origins_behind_proxy` set up."""

    config: setup.ClusterSetup
    proxy: rp.ProxyInCluster
    model_ns: str
    #: Where the servers ``allowed``, ``other`` and ``secure`` run.
    servers_ns: str
    #: The model server's key (the account a step leases).
    key: Secret
    #: Allows ``allowed`` on 80 and ``secure`` on 443, each by its Service's name and address.
    policy: EgressPolicy


@contextlib.asynccontextmanager
async def origins_behind_proxy(
    real_node: RealNodeEnv,
    node_api: k8s.KubeApi,
    need_image: dict[str, str],
    tmp_path: Path,
    *,
    probe: str = PROBE,
    agent_policies: bool = True,
) -> AsyncIterator[Origins]:
    """Fresh namespaces; the offline model server, whose one Bash call runs ``probe`` (formatted
    with the servers' namespace ``ns`` and the test CA ``ca``); the three servers; the auth proxy
    relaying to the model, under the NetworkPolicies ironflow renders (without ``agent_policies``,
    only the proxy's own: what confines the agents is the test's) and its openings to both."""
    worker_image = need_image["worker"]
    need_image["auth-proxy"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    model_ns, srv_ns = f"md-{suffix}", f"sv-{suffix}"
    key = Secret("sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex)
    with rp.cluster_namespaces(real_node, config, model_ns, srv_ns):
        tls = make_tls(tmp_path, extra_dns=(f"secure.{srv_ns}.svc.cluster.local",))
        real_node.apply_objects(
            _model_objects(model_ns, worker_image, key, probe.format(ns=srv_ns, ca=tls.ca_pem.decode().strip()))
        )
        real_node.apply_objects(_server_objects(srv_ns, worker_image, tmp_path))
        proxy = rp.deploy_auth_proxy(
            real_node, config, admin_key=rp.new_admin_key(), upstream=f"http://fake-model.{model_ns}"
        )
        await _model_serving(node_api, model_ns)
        rendered = rp.network_policies(config)
        if not agent_policies:
            rendered = [p for p in rendered if p["metadata"]["namespace"] == proxy.namespace]
        rp.enforce_policies(
            real_node,
            [
                *rendered,
                _upstream_opening(proxy.namespace, model_ns),
                _upstream_opening(proxy.namespace, srv_ns, SERVER_PORT, "in-cluster"),
                _upstream_opening(proxy.namespace, srv_ns, TLS_PORT, "in-cluster-tls"),
            ],
        )
        ips = {
            name: real_node.request("GET", f"/api/v1/namespaces/{srv_ns}/services/{name}")["spec"]["clusterIP"]
            for name in ("allowed", "secure")
        }
        # The Services' addresses are private (fixed deny): each rule names its own after resolution.
        policy = egress.policy_from_options(
            [
                f"{name}.{srv_ns}.svc.cluster.local:{port}@{ips[name]}/32"
                for name, port in (("allowed", 80), ("secure", 443))
            ]
        )
        yield Origins(config, proxy, model_ns, srv_ns, key, policy)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_an_agent_pod_fetches_from_an_allowed_in_cluster_host_through_the_proxy_and_nothing_else(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str, tmp_path: Path
) -> None:
    runner_image = need_image["runner"]
    async with origins_behind_proxy(real_node, node_api, need_image, tmp_path) as found:
        config, proxy, model_ns, key = found.config, found.proxy, found.model_ns, found.key
        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(config.namespace).auth_proxy(proxy.url)
        provider = provider.egress(found.policy).timeout(300)
        if runtime == "gvisor":
            provider = provider.runtime_class("gvisor")
        step = AgentConfig("Fetch.", allowed_tools=("Bash",)).account_lease(
            AccountLease("acct-1", "ANTHROPIC_API_KEY", key)
        )
        result, took = await rp.run_step(
            real_node, proxy, provider.settings, node_api, step.scoped(f"run-{uuid.uuid4().hex[:6]}", "f")
        )
        assert result.text == "Probed."
        _, output = _tool_results(await model_log(node_api, model_ns))
        seen = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
        assert seen["proxy-set"] == "yes", output
        assert seen["proxied-allowed"] == "allowed-body 200", output  # through the proxy, the server's own body
        assert seen["proxied-other"].startswith("ironflow egress: denied other."), output  # the proxy's refusal
        assert seen["proxied-other"].endswith(" 403"), output
        assert "other-body" not in output, output
        for name in ("allowed", "other"):  # around the proxy: the NetworkPolicy lets no connection open
            assert seen[f"direct-{name}"] in ("000 exit=28", "000 exit=7"), output
        # HTTPS through a CONNECT tunnel, verified end to end against the test CA; the other host's
        # tunnel is refused by the proxy (403 to the CONNECT) before any connection.
        assert seen["https-secure"] == "secure-body 200 200", output
        assert seen["https-other"].split()[-1] == "403", output  # the CONNECT's answer
        # The proxy password is the step's egress-only token, not its Claude token: the model relay refuses it.
        assert seen["password-kind"] == "ifap claude-token-set=yes", output
        assert seen["password-is-claude-token"] == "no", output
        assert "this token only reaches the egress proxy" in seen["relay-with-password"], output
        assert seen["relay-with-password"].endswith(" 403"), output
        print(f"{runtime}: egress step {took:.1f}s; {seen}")
