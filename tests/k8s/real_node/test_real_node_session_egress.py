"""On a real node, with no Cilium: a Kubernetes sandbox session opened with an egress policy (what
``sandbox open --allow-host`` gives) reaches the allowed in-cluster host through the auth proxy's
egress listener and is refused the other; its pod reaches neither around the proxy; its token
holds for the session's life and is revoked at close.

The servers, the proxy and its openings are the k8s egress test's (``origins_behind_proxy``), under
the NetworkPolicies ironflow renders (session pods: kube-dns and the proxy's 3128 only). The
session is reached by exec, as the other session tests here: this test's process is outside the
node's network. The session's pod manifest names the file of its variables, never the token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fakes import real_node_proxy as rp
from tests.k8s.real_node.test_real_node_egress import origins_behind_proxy

from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import egress_delivery
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(900)  # the node's start (images loaded) counts in the first test

#: Run in the session: through the proxy (the delivered HTTPS_PROXY), then around it.
PROBE = """
for name in allowed other; do
  url="http://$name.{ns}.svc.cluster.local/"
  echo "proxied-$name=$(curl -s -m 20 -w ' %{{http_code}}' "$url" | tr '\\n' ' ')"
  echo "direct-$name=$(curl -s -m 5 --noproxy '*' -o /dev/null -w '%{{http_code}}' "$url"; echo " exit=$?")"
done
"""
#: Run in an agent pod with a proxy URL on stdin: the status the egress proxy gives its token.
WITH_TOKEN = (
    "read -r proxy; curl -s -m 20 -o /dev/null -w '%{{http_code}}' -x \"$proxy\" http://allowed.{ns}.svc.cluster.local/"
)


async def proxy_status(api: k8s.KubeApi, ns: str, proxy_url: str, srv_ns: str) -> str:
    """What the egress proxy answers the pod ``agent`` of ``ns`` fetching ``allowed`` with ``proxy_url``."""
    argv = ("sh", "-c", WITH_TOKEN.format(ns=srv_ns))
    done = await api.exec(ns, "agent", argv, stdin=proxy_url.encode() + b"\n")
    return done.stdout.decode()


async def test_a_session_opened_with_allow_host_reaches_that_host_through_the_proxy_and_nothing_else(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    runner = need_image["runner"]
    async with origins_behind_proxy(real_node, node_api, need_image, tmp_path) as found:
        config, proxy = found.config, found.proxy
        ns = config.namespace
        srv_ns = found.servers_ns
        provider = K8sEphemeralProvider.sandboxed(runner).namespace(ns).image_pull_policy("Never").auth_proxy(proxy.url)
        await rp.start_pods(node_api, [rp.sleeper_pod("agent", runner, ns, labels=rp.agent_pod_labels())])
        with rp.forward_into_node(real_node, proxy.cluster_ip, 80) as admin_url:
            async with AdminClient(admin_url, proxy.admin_key) as admin:
                sessions = K8sSessions(provider.settings, api=node_api, issuer=admin, transport="exec")
                async with sessions:
                    sandbox = await sessions.open(OpenOptions(ttl=300, egress=found.policy))
                    ran = await sandbox.commands.run(["sh", "-c", PROBE.format(ns=srv_ns)])
                    pod = await node_api.get(k8s.PODS, ns, sandbox.id)
                    # The session's token, read as a command of the session could: to try it after close.
                    kept = await sandbox.commands.run(["cat", egress_delivery.ENV_FILE])
                    proxy_url = json.loads(kept.stdout)["HTTPS_PROXY"]

                    before = await proxy_status(node_api, ns, proxy_url, srv_ns)
                    await sandbox.close()  # its handle's client, then the session (the token revoked)
                    after = await proxy_status(node_api, ns, proxy_url, srv_ns)

    seen = dict(line.split("=", 1) for line in ran.stdout.splitlines() if "=" in line)
    assert seen["proxied-allowed"] == "allowed-body 200", ran.stdout  # the server's own body, through the proxy
    assert seen["proxied-other"].startswith("ironflow egress: denied other."), ran.stdout
    assert seen["proxied-other"].endswith(" 403"), ran.stdout
    for name in ("allowed", "other"):  # around the proxy: the session pods' NetworkPolicy opens nothing
        assert seen[f"direct-{name}"] in ("000 exit=28", "000 exit=7"), ran.stdout
    assert "ifap_" not in json.dumps(pod)  # the manifest names the file, never the token
    assert proxy_url.startswith("http://ironflow:ifap_")
    assert (before, after) == ("200", "407")  # the session's token held until close, then was revoked
    print(f"k8s session egress: {seen}; token before close {before}, after {after}")
