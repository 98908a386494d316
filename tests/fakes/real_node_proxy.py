"""The auth proxy on the real node as ``ironflow manifests`` renders it, and the ways a test
reaches pods there: probe pods to exec connection attempts from, and a forward from the host.

Why shared: the NetworkPolicy, agent-step and check tests all need the proxy running from its
built image behind its Service, deployed the product's way (:func:`ironflow.cluster.setup.render`
with an :class:`~ironflow.cluster.workloads.AuthProxyDeployment`), not a hand-written pod.

The one change made to what is rendered is the one its own comment tells an operator without
PostgreSQL to make: the two database entries are dropped and one replica runs. An upstream other
than api.anthropic.com (the offline model server) is given as ``IRONFLOW_AUTH_PROXY_UPSTREAM``,
the documented variable for tests and mirrors. No secret value is logged or put in a manifest
other than its Secret.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import labels
from ironflow.auth_proxy import config as proxy_config
from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.cluster import network, proxy_address, service_network, session_network, setup, workloads
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.results import AgentResult
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import KubeEnvError
from ironflow.testing.polling import eventually, eventually_sync
from ironflow.testing.realnode import RealNodeEnv

__all__ = [
    "ProxyInCluster",
    "agent_pod_labels",
    "cluster_namespaces",
    "cluster_setup",
    "connect",
    "deploy_auth_proxy",
    "enforce_policies",
    "forward_into_node",
    "http_status",
    "network_policies",
    "new_admin_key",
    "node_connects",
    "pod_ip",
    "proxy_pod",
    "run_step",
    "sleeper_pod",
    "start_pods",
    "worker_pod_labels",
]

_CA_CONFIGMAP: Final = "ironflow-auth-proxy-ca"
_CA_DIR: Final = "/etc/ironflow-auth-proxy-ca"
_DATABASE_ENV: Final = frozenset({proxy_config.DATABASE_URL_ENV, proxy_config.SECRET_KEYS_ENV})
#: Run by ``exec`` in a probe pod: one TCP connection, its outcome in one word.
_CONNECT: Final = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    addr = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
except OSError:
    print("nodns"); sys.exit()
try:
    socket.create_connection(addr, timeout=float(sys.argv[3])).close(); print("open")
except TimeoutError:
    print("timeout")
except OSError as exc:
    print("refused:" + type(exc).__name__)
"""
_NODE_CONNECT: Final = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 2).close()"
#: Run inside the node's namespaces with the host's listener: relay each connection to host:port.
_FORWARD: Final = """
import asyncio, socket, sys
from ironflow.testing._node_holder import _pipe

async def handle(reader, writer):
    try:
        up_reader, up_writer = await asyncio.open_connection(sys.argv[2], int(sys.argv[3]))
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

async def main():
    server = await asyncio.start_server(handle, sock=socket.socket(fileno=int(sys.argv[1])))
    await server.serve_forever()

asyncio.run(main())
"""
_HTTP: Final = """
import sys, urllib.request, urllib.error
headers = dict(h.split(": ", 1) for h in sys.argv[5:])
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode() or None, method=sys.argv[3], headers=headers)
try:
    print(urllib.request.urlopen(req, timeout=float(sys.argv[4])).status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError as exc:
    print("error:" + type(exc).__name__)
"""


def new_admin_key() -> Secret:
    """A fresh admin key, long enough for the proxy."""
    return Secret(uuid.uuid4().hex + uuid.uuid4().hex)


def cluster_setup(*, agents: str, worker: str, proxy: str) -> setup.ClusterSetup:
    """What ``ironflow manifests --auth-proxy http://ironflow-auth-proxy.<proxy> --auth-proxy-deployment``
    renders for these namespaces: plain NetworkPolicies, one proxy replica (no PostgreSQL)."""
    return setup.ClusterSetup(
        namespace=agents,
        worker_namespace=worker,
        auth_proxy_url=f"http://{network.AUTH_PROXY_NAME}.{proxy}",
        auth_proxy_deployment=workloads.AuthProxyDeployment(replicas=1),
        presets=(),
        egress_profiles=(),
    )


def _rendered(config: setup.ClusterSetup, *kinds: str) -> list[dict[str, Any]]:
    return [doc for doc in setup.render(config) if doc["kind"] in kinds]


def network_policies(config: setup.ClusterSetup) -> list[dict[str, Any]]:
    """The NetworkPolicies ironflow renders for ``config`` (default deny, DNS, the proxy's)."""
    return _rendered(config, "NetworkPolicy")


#: Policies kube-router writes no rule for until their pods exist (a service pod, an agent, a
#: session pod): nothing to wait for when they are applied.
_RULES_LATER: Final = frozenset(
    {service_network.INGRESS_NAME, service_network.AGENT_EGRESS_NAME, session_network.NAME, session_network.EGRESS_NAME}
)


def enforce_policies(env: RealNodeEnv, policies: list[dict[str, Any]]) -> None:
    """Apply ``policies`` and wait until kube-router enforces each one with rules: a test's pods
    then start under them (its rule comments name each such policy and its namespace)."""
    env.apply_objects(policies)
    opening = [
        p["metadata"]
        for p in policies
        if (p["spec"].get("egress") or p["spec"].get("ingress")) and p["metadata"]["name"] not in _RULES_LATER
    ]
    wait_enforced(env, [(m["name"], m["namespace"]) for m in opening])


def wait_enforced(env: RealNodeEnv, policies: list[tuple[str, str]]) -> None:
    """Wait until kube-router enforces each ``(name, namespace)`` policy with rules (one whose
    pods exist: it writes none before)."""
    names = [re.compile(rf"policy name:? {name} namespace {namespace}\b") for name, namespace in policies]

    def enforced() -> bool:
        rules = env.run_in_node(["iptables-save", "-t", "filter"]).stdout
        return all(name.search(rules) for name in names)

    eventually_sync(enforced, limit_s=60, interval_s=0.3, what="kube-router enforcing the policies")


#: How long a test's namespaces may hold pods after it (the worker's grace is 60 s).
PODS_GONE_S: Final = 120.0


@contextlib.contextmanager
def cluster_namespaces(env: RealNodeEnv, config: setup.ClusterSetup, *extra: str) -> Iterator[None]:
    """The rendered Namespaces (agents: ``restricted``), plus ``extra`` plain ones; deleted after,
    and their pods waited out (up to :data:`PODS_GONE_S`): a proxy's or worker's pod still in its
    grace holds its CPU request, and left the next test's step ``Unschedulable`` (Insufficient cpu)."""
    docs = _rendered(config, "Namespace")
    docs += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in extra]
    names = [doc["metadata"]["name"] for doc in docs]
    try:
        env.apply_objects(docs)
        yield
    finally:
        for name in names:
            with contextlib.suppress(KubeEnvError, OSError):
                env.request("DELETE", f"/api/v1/namespaces/{name}")
        with contextlib.suppress(AssertionError):  # best effort: never hides the test's own failure
            eventually_sync(lambda: not _pods_in(env, names), limit_s=PODS_GONE_S, interval_s=0.5)


def _pods_in(env: RealNodeEnv, namespaces: list[str]) -> list[str]:
    """The pods left in ``namespaces`` (a listing that fails counts as none left)."""
    left = []
    for ns in namespaces:
        with contextlib.suppress(KubeEnvError, OSError):
            left += [p["metadata"]["name"] for p in env.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]]
    return left


@dataclass(frozen=True)
class ProxyInCluster:
    """A deployed proxy: its Service URL (what agent pods are given) and its admin key."""

    namespace: str
    url: str
    admin_key: Secret
    cluster_ip: str

    def __repr__(self) -> str:
        return f"ProxyInCluster(url={self.url!r}, cluster_ip={self.cluster_ip!r})"


def _proxy_objects(config: setup.ClusterSetup, upstream: str | None, ca_bundle: str | None) -> list[dict[str, Any]]:
    docs = _rendered(config, "Deployment", "Service", "PodDisruptionBudget")
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = [e for e in container["env"] if e["name"] not in _DATABASE_ENV]  # no PostgreSQL: as its comment says
        if upstream is not None:
            env.append({"name": proxy_config.UPSTREAM_ENV, "value": upstream})
        if ca_bundle is not None:  # as an operator trusts a private CA: OpenSSL's own variable, a ConfigMap
            env.append({"name": "SSL_CERT_FILE", "value": f"{_CA_DIR}/ca.crt"})
            pod.setdefault("volumes", []).append({"name": "ca", "configMap": {"name": _CA_CONFIGMAP}})
            container.setdefault("volumeMounts", []).append({"name": "ca", "mountPath": _CA_DIR, "readOnly": True})
        container["env"] = env
    if ca_bundle is not None:
        ns = docs[0]["metadata"]["namespace"]
        meta = {"name": _CA_CONFIGMAP, "namespace": ns}
        docs.insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"ca.crt": ca_bundle}})
    return docs


def deploy_auth_proxy(
    env: RealNodeEnv,
    config: setup.ClusterSetup,
    *,
    admin_key: Secret,
    upstream: str | None = None,
    ca_bundle: str | None = None,
    timeout_s: float = 120.0,
) -> ProxyInCluster:
    """Apply the proxy's rendered Secret-backed Deployment, Service and budget; wait until Ready.
    ``ca_bundle``: the PEM certificates the proxy trusts instead of the system's (a git host here).

    Its image is the one the manifests name (``ironflow-auth-proxy:<version>``, IfNotPresent),
    found on the node as loaded from ``scripts/images build auth-proxy``.
    """
    address = config.auth_proxy
    assert isinstance(address, proxy_address.ProxyService), address
    ns = address.namespace
    value = base64.b64encode(admin_key.reveal().encode()).decode()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": workloads.AUTH_PROXY_SECRET, "namespace": ns},
        "data": {"admin-key": value},
    }
    env.apply_objects([secret, *_proxy_objects(config, upstream, ca_bundle)])
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/{network.AUTH_PROXY_NAME}"

    def ready() -> bool:
        return bool(env.request("GET", path).get("status", {}).get("readyReplicas"))

    def why() -> str:
        pods = env.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items", [])
        return f"the auth proxy Ready in {ns}; pods: {json.dumps([p.get('status') for p in pods])[:3000]}"

    eventually_sync(ready, limit_s=timeout_s, interval_s=0.3, what=why)
    service = env.request("GET", f"/api/v1/namespaces/{ns}/services/{address.service}")
    cluster_ip = service["spec"]["clusterIP"]

    def routed() -> bool:  # kube-proxy writes the Service's rules a moment after it exists
        return node_connects(env, cluster_ip, address.port)

    eventually_sync(routed, limit_s=30, interval_s=0.3, what=f"the proxy's Service {cluster_ip} routed by kube-proxy")
    return ProxyInCluster(ns, address.url, admin_key, cluster_ip)


def node_connects(env: RealNodeEnv, host: str, port: int) -> bool:
    """Whether a TCP connection from the node itself (where kubelet probes from) opens."""
    probe = [sys.executable, "-c", _NODE_CONNECT, host, str(port)]
    return env.run_in_node(probe, timeout=10).returncode == 0


# --- pods to probe from -------------------------------------------------------------------


def agent_pod_labels() -> dict[str, str]:
    """The labels ironflow puts on an agent pod (rendered by the provider, not restated here)."""
    pods = K8sEphemeralProvider.sandboxed("unused:1").manifests(AgentConfig("probe"))
    (pod,) = [o for o in pods if o["kind"] == "Pod"]
    return dict(pod["metadata"]["labels"])


def worker_pod_labels(config: setup.ClusterSetup) -> dict[str, str]:
    """The labels of the worker's pods as ``--worker-deployment`` renders them (the proxy admits these)."""
    with_worker = dataclasses.replace(config, worker_deployment=workloads.WorkerDeployment())
    (deployment,) = [
        d for d in _rendered(with_worker, "Deployment") if d["metadata"]["name"] == network.WORKER_POD_NAME
    ]
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def sleeper_pod(
    name: str, image: str, namespace: str, *, labels: Mapping[str, str] | None = None, command: str = "sleep 3600"
) -> dict[str, Any]:
    """A hardened pod (uid 10001, read-only root, no capabilities) running ``command``; ``labels``
    replace PodRun's own, to stand for an agent pod or the worker."""
    pod = PodRun(name, image, command).namespace(namespace).restricted(read_only_root=True).build_pod()
    if labels is not None:
        pod["metadata"]["labels"] = dict(labels)
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


async def start_pods(api: k8s.KubeApi, pods: list[dict[str, Any]], *, limit_s: float = 120.0) -> None:
    """Create the pods and wait until each one runs and is Ready."""
    for pod in pods:
        await api.create(k8s.PODS, pod["metadata"]["namespace"], pod)

    async def all_ready() -> bool:
        for pod in pods:
            got = await api.get(k8s.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            conditions = got.get("status", {}).get("conditions", [])
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return False
        return True

    await eventually(all_ready, limit_s=limit_s, interval_s=0.3, what="the probe pods Ready")


async def proxy_pod(api: k8s.KubeApi, namespace: str) -> str:
    """The name of the (one) proxy pod the Deployment made."""
    selector = f"{labels.LABEL_NAME}={network.AUTH_PROXY_NAME}"
    (pod,) = (await api.list(k8s.PODS, namespace, label_selector=selector)).items
    return str(pod["metadata"]["name"])


async def pod_ip(api: k8s.KubeApi, namespace: str, name: str) -> str:
    return str((await api.get(k8s.PODS, namespace, name))["status"]["podIP"])


async def connect(api: k8s.KubeApi, namespace: str, pod: str, host: str, port: int, *, wait_s: float = 3.0) -> str:
    """One TCP connection from inside ``pod``: ``open``, ``timeout``, ``refused:…`` or ``nodns``."""
    done = await api.exec(namespace, pod, ("python", "-c", _CONNECT, host, str(port), str(wait_s)))
    return done.stdout.decode().strip() or f"probe failed: {done.stderr.decode()[-500:]}"


async def opens(api: k8s.KubeApi, ns: str, pod: str, host: str, port: int, *, limit_s: float = 20.0) -> None:
    """An allowed connection from ``pod`` opens, retried briefly (kube-router may refuse a new pod's
    first connection while its ipsets sync: fail closed); a refusal is never retried into a pass."""
    seen: list[str] = []

    async def opened() -> bool:
        seen.append(await connect(api, ns, pod, host, port, wait_s=2))
        return seen[-1] == "open"

    await eventually(opened, limit_s=limit_s, interval_s=0.5, what=lambda: f"{pod} -> {host}:{port} open: {seen}")


async def http_status(
    api: k8s.KubeApi,
    namespace: str,
    pod: str,
    url: str,
    *,
    method: str = "GET",
    body: str = "",
    headers: Mapping[str, str] | None = None,
    wait_s: float = 5.0,
) -> str:
    """One HTTP request from inside ``pod``: the status code, or ``error:<kind>``. A header value
    travels on the exec's command line, visible in the pod only: give it test tokens only."""
    pairs = tuple(f"{k}: {v}" for k, v in (headers or {}).items())
    done = await api.exec(namespace, pod, ("python", "-c", _HTTP, url, body, method, str(wait_s), *pairs))
    return done.stdout.decode().strip() or f"probe failed: {done.stderr.decode()[-500:]}"


# --- the host's way in --------------------------------------------------------------------


@contextlib.contextmanager
def forward_into_node(env: RealNodeEnv, host: str, port: int) -> Iterator[str]:
    """``http://127.0.0.1:<port>`` on the host, forwarded to ``host:port`` inside the node (as the
    worker reaches the proxy). The forwarder is this test's own process, ended here."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    local = int(listener.getsockname()[1])
    fd = listener.fileno()
    argv = [*env.nsenter(), sys.executable, "-c", _FORWARD, str(fd), host, str(port)]
    proc = subprocess.Popen(argv, pass_fds=[fd], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    listener.close()
    try:
        yield f"http://127.0.0.1:{local}"
    finally:
        proc.kill()  # nothing of its own to flush; ends its open relays with it
        proc.wait()


async def run_step(
    env: RealNodeEnv, proxy: ProxyInCluster, settings: ProviderSettings, api: k8s.KubeApi, step: AgentConfig
) -> tuple[AgentResult, float]:
    """Run ``step`` by the product's path (``StepRunner``, the proxy's admin API as its issuer, reached
    from the host as the worker does); its result and how long it took in seconds."""
    with forward_into_node(env, proxy.cluster_ip, 80) as admin_url:
        async with AdminClient(admin_url, proxy.admin_key) as admin:
            runner = StepRunner.of(settings, api=api, issuer=admin, worker_env={})
            started = time.monotonic()
            result = await runner.run(step)
            return result, time.monotonic() - started
