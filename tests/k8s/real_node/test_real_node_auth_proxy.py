"""On a real node: the auth proxy runs from its built image as ``ironflow manifests`` renders its
Deployment and Service (hardened, read-only root, Pod Security ``restricted`` namespace), kubelet's
readiness probe passes, and an agent pod reaches it by the Service's name: no token is refused,
a token the worker issued through the admin API is honoured. Skipped when the node's binaries or
the auth-proxy and worker images are missing.
"""

from __future__ import annotations

import time
import uuid

import pytest
from tests.fakes import real_node_proxy as rp

from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.auth_proxy.issuing import Credential
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)  # the node's start (images loaded) counts in the first test


async def test_the_auth_proxy_serves_agent_pods_by_its_service_name(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    need_image["auth-proxy"]  # the rendered Deployment names it; skip when it is not built
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    with rp.cluster_namespaces(real_node, config):
        proxy = rp.deploy_auth_proxy(real_node, config, admin_key=rp.new_admin_key())
        assert proxy.url.startswith(f"http://ironflow-auth-proxy.px-{suffix}")  # the Service, by name
        pod = await node_api.get(k8s.PODS, proxy.namespace, await rp.proxy_pod(node_api, proxy.namespace))
        (container,) = pod["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["automountServiceAccountToken"] is False

        agent = rp.sleeper_pod("agent", need_image["worker"], config.namespace, labels=rp.agent_pod_labels())
        await rp.start_pods(node_api, [agent])
        ns = config.namespace
        assert await rp.http_status(node_api, ns, "agent", f"{proxy.url}/healthz") == "200"
        messages = f"{proxy.url}/v1/messages"
        assert await rp.http_status(node_api, ns, "agent", messages, method="POST", body="{}") == "401"

        with rp.forward_into_node(real_node, proxy.cluster_ip, 80) as admin_url:
            async with AdminClient(admin_url, proxy.admin_key) as admin:
                credential = Credential("api_key", Secret("sk-ant-api03-" + "t" * 40))
                issued = await admin.issue("run-1", "step-1", int(time.time()) + 300, credential=credential)
                bearer = {"Authorization": f"Bearer {issued.token.reveal()}", "Content-Type": "application/json"}
                # honoured: relayed to api.anthropic.com, which this node cannot reach (502, not 401)
                got = await rp.http_status(node_api, ns, "agent", messages, method="POST", body="{}", headers=bearer)
                assert got == "502", got
                assert await admin.revoke(issued.id)
                got = await rp.http_status(node_api, ns, "agent", messages, method="POST", body="{}", headers=bearer)
                assert got == "401", got
