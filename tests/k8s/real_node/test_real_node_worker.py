"""On a real node: the worker itself, deployed as ``ironflow manifests --worker-deployment`` renders
it (and as the Helm chart's ``helm template`` renders it), from the built worker image, runs a
queued run end to end: it takes the run from its store, creates the agent pod with the built
runner image in the agents' namespace (Pod Security ``restricted``) as its own ServiceAccount,
and the real Claude Code CLI in that pod answers through the in-cluster auth proxy (its built
image, behind its Service) from the offline model server; the run's output is read back. On runc,
and on gVisor as ``--gvisor`` (the chart's ``gvisor=true``) renders it: the worker's provider
file then names RuntimeClass ``gvisor`` for every agent pod.

What is deployed as rendered, untouched: the worker's ServiceAccount, Role, RoleBinding, provider
ConfigMap and Deployment (default images, ``IfNotPresent``: the names ``scripts/images build``
loads), the Namespaces, the presets and the NetworkPolicies, enforced by kube-router before the
worker starts (agents reach only the proxy; only agents and the worker reach it). Added: the
proxy's egress to its upstream here, a pod (the rendered egress opens only public :443), as an
operator with a mirror adds it. Left out: the chart's own proxy objects (the proxy runs as
``tests/fakes/real_node_proxy.py`` deploys it: one replica, no PostgreSQL, as its comment tells
such an operator).

The store is the one the worker's Secret names: ``sqlite:////tmp/ironflow.db``, on the
Deployment's own ``/tmp`` emptyDir, so only that pod can execute the run. The test queues the run
and reads it back with the product's CLI, exec'd in the worker's container (the same image and
env). The offline model answers only the key in the worker's Secret (``anthropic-api-key``),
which the worker hands to the proxy; the agent pod gets an opaque proxy token. Skipped when the
node's binaries or the runner, auth-proxy and worker images (or helm, for the chart) are missing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import Any, Final

import pytest
import typer
import yaml
from tests.fakes import real_node_proxy as rp
from typer.testing import CliRunner

from ironflow import labels
from ironflow.cli import manifests
from ironflow.cluster import image_builds, network, workloads
from ironflow.k8s.commands.pod_runs import command_line
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.testing import helm, realnode
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(900)  # the node's start (images loaded) counts in the first test

CHART: Final = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "ironflow"
STORE: Final = "sqlite:////tmp/ironflow.db"  # the Deployment's /tmp emptyDir
WORKFLOW_PATH: Final = "/tmp/review.py"
REPLY: Final = "Reviewed in an agent pod the worker made."
MODEL_PORT: Final = 8086
#: A one-step workflow, written into the worker's /tmp: a run stores the reference, the worker loads it.
WORKFLOW: Final = """
from ironflow.steps import AgentConfig

async def review(ctx, input):
    result = await ctx.agent("review", AgentConfig(input["prompt"]))
    return {"text": result.text, "run": ctx.run_id}
"""
#: The offline model server (ironflow.fake_model): one reply, only for the key it is given.
MODEL: Final = """
import asyncio, os, sys
from ironflow.fake_model.server import FakeAnthropic, Script

async def main():
    key = os.environ["MODEL_KEY"]
    fake = FakeAnthropic(Script.of(default=sys.argv[1]), host="0.0.0.0", port=int(sys.argv[2]), required_credential=key)
    await fake.start()
    print("serving", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""
#: What the worker's objects are, of everything rendered (Namespaces are applied before).
WORKER_KINDS: Final = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment")
_WRITE: Final = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"

cli = typer.Typer()
cli.callback()(lambda: None)
manifests.register(cli)


def _secret(name: str, namespace: str, values: dict[str, Secret | str]) -> dict[str, Any]:
    data = {k: v.reveal() if isinstance(v, Secret) else v for k, v in values.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def _model_server(namespace: str, image: str, key: Secret) -> list[dict[str, Any]]:
    """The offline model server as a pod of the worker image, behind Service ``fake-model``."""
    argv = ["python", "-c", MODEL, REPLY, str(MODEL_PORT)]
    pod = rp.sleeper_pod(
        "fake-model", image, namespace, labels={"app": "fake-model"}, command=f"exec {command_line(argv)}"
    )
    pod["spec"]["containers"][0]["env"] = [
        {"name": "MODEL_KEY", "valueFrom": {"secretKeyRef": {"name": "model-key", "key": "key"}}}
    ]
    ports = [{"port": 80, "targetPort": MODEL_PORT}]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "fake-model", "namespace": namespace}}
    service["spec"] = {"selector": {"app": "fake-model"}, "ports": ports}
    return [_secret("model-key", namespace, {"key": key}), service, pod]


def _manifests_objects(agents: str, worker: str, proxy_url: str, *, gvisor: bool) -> list[dict[str, Any]]:
    """``ironflow manifests -n AGENTS --worker-namespace WORKER --auth-proxy URL --worker-deployment
    [--gvisor] -o json``."""
    flags = ["-n", agents, "--worker-namespace", worker, "--auth-proxy", proxy_url, "--worker-deployment"]
    flags += ["--gvisor"] if gvisor else []
    result = CliRunner().invoke(cli, ["manifests", *flags, "-o", "json"])
    assert result.exit_code == 0, result.stderr
    items: list[dict[str, Any]] = json.loads(result.stdout)["items"]
    return items


def _helm_objects(agents: str, worker: str, proxy_ns: str, *, gvisor: bool) -> list[dict[str, Any]]:
    """``helm template`` of the chart with its defaults but the three namespaces (and ``gvisor``)."""
    try:
        binary = helm.find_helm()
    except helm.HelmNotAvailable as exc:
        pytest.skip(str(exc))
    sets = [f"namespaces.agents={agents}", f"namespaces.worker={worker}", f"authProxy.namespace={proxy_ns}"]
    sets += ["gvisor=true"] if gvisor else []
    done = helm.run_helm("template", "ironflow", str(CHART), *(a for s in sets for a in ("--set", s)), helm=binary)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _worker_objects(rendered: list[dict[str, Any]], worker: str, agents: str) -> list[dict[str, Any]]:
    """The worker's own objects, the agents' presets and every NetworkPolicy, in render order (the
    Namespaces are applied first, the proxy's Deployment, Service and budget are left out)."""
    keep = []
    for doc in rendered:
        ns = doc["metadata"].get("namespace")
        if doc["kind"] == "NetworkPolicy" or (doc["kind"] in WORKER_KINDS and ns in (worker, agents)):
            keep.append(doc)
    return keep


def _proxy_upstream(proxy_ns: str, model_ns: str) -> dict[str, Any]:
    """The proxy pods' egress to the model server's namespace on its port (an operator's addition)."""
    to = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": model_ns}}}]
    rule = {"to": to, "ports": [{"port": MODEL_PORT, "protocol": "TCP"}]}
    selector = {"matchLabels": {labels.LABEL_NAME: network.AUTH_PROXY_NAME}}
    meta = {"name": "ironflow-auth-proxy-upstream", "namespace": proxy_ns}
    spec = {"podSelector": selector, "policyTypes": ["Egress"], "egress": [rule]}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta, "spec": spec}


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])


async def _exec(api: k8s.KubeApi, namespace: str, pod: str, *argv: str) -> str:
    """``argv`` in the worker's container (its image, its env: ``IRONFLOW_STORE`` from the Secret)."""
    async with asyncio.timeout(120):
        done = await api.exec(namespace, pod, argv)
    assert done.exit_code == 0, f"{argv[:3]} exited {done.exit_code}: {done.stderr.decode()[-2000:]}"
    return done.stdout.decode()


async def _watch_pods(api: k8s.KubeApi, namespace: str, seen: dict[str, dict[str, Any]]) -> None:
    """Record every pod of ``namespace`` (by name, its latest state) until cancelled."""
    while True:
        for pod in (await api.list(k8s.PODS, namespace)).items:
            seen[pod["metadata"]["name"]] = pod
        await asyncio.sleep(0.2)


async def _worker_ready(env: RealNodeEnv, api: k8s.KubeApi, namespace: str) -> tuple[dict[str, Any], float]:
    """The worker's pod once its Deployment has a Ready replica (its /healthz answers), and how long that took."""
    deployment = f"/apis/apps/v1/namespaces/{namespace}/deployments/{network.WORKER_POD_NAME}"

    def why() -> str:
        pods = env.request("GET", f"/api/v1/namespaces/{namespace}/pods").get("items", [])
        return f"the worker Ready in {namespace}; pods: {json.dumps([p.get('status') for p in pods])[:3000]}"

    started = time.monotonic()
    await eventually(
        lambda: env.request("GET", deployment).get("status", {}).get("readyReplicas"),
        limit_s=180,
        interval_s=0.5,
        what=why,
    )
    ready_s = time.monotonic() - started
    selector = f"{labels.LABEL_NAME}={network.WORKER_POD_NAME}"
    (pod,) = (await api.list(k8s.PODS, namespace, label_selector=selector)).items
    return pod, ready_s


async def _queue_and_wait(api: k8s.KubeApi, namespace: str, worker: str) -> tuple[dict[str, Any], float]:
    """Queue a run of :data:`WORKFLOW` in the worker's store (``ironflow run``, no ``--wait``: the worker
    takes it) and read it back (``ironflow runs show``) until it ends; the run, and seconds to its end."""
    await _exec(api, namespace, worker, "python", "-c", _WRITE, WORKFLOW_PATH, WORKFLOW)
    queued = await _exec(
        api, namespace, worker, "ironflow", "run", f"{WORKFLOW_PATH}:review", "--backend", "k8s",
        "--input", json.dumps({"prompt": "Review the change."}),
    )  # fmt: skip
    run_id = queued.strip()
    started = time.monotonic()

    async def finished() -> dict[str, Any] | None:
        shown = await _exec(api, namespace, worker, "ironflow", "runs", "show", run_id, "-o", "json")
        run: dict[str, Any] = json.loads(shown)
        return run if run["status"] in ("succeeded", "failed", "cancelled") else None

    run = await eventually(finished, limit_s=300, interval_s=1.0, what=f"run {run_id} finished")
    return run, time.monotonic() - started


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
@pytest.mark.parametrize("source", ["manifests", "helm"])
async def test_the_worker_deployment_runs_a_queued_run_in_an_agent_pod(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], source: str, runtime: str
) -> None:
    """``manifests``: the objects of ``ironflow manifests --worker-deployment``; ``helm``: those of
    ``helm template`` with the chart's defaults, first shown equal to the manifests' ones. ``gvisor``:
    rendered with ``--gvisor`` / ``gvisor=true`` (the node has the RuntimeClass, handler runsc)."""
    gvisor = runtime == "gvisor"
    worker_image, runner_image = need_image["worker"], need_image["runner"]
    need_image["auth-proxy"]
    # The rendered defaults name the built images as the node knows them: no image is patched.
    assert image_builds.local_reference(workloads.DEFAULT_WORKER_IMAGE) == worker_image
    assert image_builds.local_reference(workloads.DEFAULT_RUNNER_IMAGE) == runner_image
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    agents, worker_ns, model_ns = config.namespace, config.worker_namespace, f"md-{suffix}"
    proxy_ns = f"px-{suffix}"
    proxy_url = f"http://{network.AUTH_PROXY_NAME}.{proxy_ns}"
    rendered = _worker_objects(_manifests_objects(agents, worker_ns, proxy_url, gvisor=gvisor), worker_ns, agents)
    if source == "helm":
        charted = _worker_objects(_helm_objects(agents, worker_ns, proxy_ns, gvisor=gvisor), worker_ns, agents)
        assert {_key(d): d for d in charted} == {_key(d): d for d in rendered}
        rendered = charted
    assert {d["kind"] for d in rendered} == {*WORKER_KINDS, "NetworkPolicy"}, [_key(d) for d in rendered]
    key = Secret("sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex)
    admin_key = rp.new_admin_key()
    with rp.cluster_namespaces(real_node, config, model_ns):
        real_node.apply_objects(_model_server(model_ns, worker_image, key))
        rp.deploy_auth_proxy(real_node, config, admin_key=admin_key, upstream=f"http://fake-model.{model_ns}")
        worker_secret: dict[str, Secret | str] = {
            "store-url": STORE,
            "auth-proxy-admin-key": admin_key,
            "anthropic-api-key": key,
        }
        stored = _secret(workloads.WORKER_SECRET, worker_ns, worker_secret)
        real_node.apply_objects([stored, *rendered, _proxy_upstream(proxy_ns, model_ns)])

        def enforced() -> bool:  # kube-router names a policy's namespace in its rules
            rules = real_node.run_in_node(["iptables-save", "-t", "filter"]).stdout
            return agents in rules and proxy_ns in rules

        await eventually(enforced, limit_s=60, interval_s=0.3, what="kube-router enforcing the policies")
        worker_pod, ready_s = await _worker_ready(real_node, node_api, worker_ns)
        worker = worker_pod["metadata"]["name"]
        assert worker_pod["spec"]["containers"][0]["image"] == workloads.DEFAULT_WORKER_IMAGE
        assert worker_pod["spec"]["serviceAccountName"] == config.worker_service_account

        seen: dict[str, dict[str, Any]] = {}
        watcher = asyncio.create_task(_watch_pods(node_api, agents, seen))
        try:
            run, took = await _queue_and_wait(node_api, worker_ns, worker)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        assert run["status"] == "succeeded", run.get("error")
        assert run["output"] == {"text": REPLY, "run": run["id"]}, run
        (step,) = run["steps"]
        assert (step["name"], step["kind"], step["status"]) == ("review", "agent", "succeeded"), step

        # The step's pod: made by the worker in the agents' namespace, the runner image, on the node.
        pods = [p for p in seen.values() if p["metadata"]["labels"].get(labels.LABEL_RUN_ID) == run["id"]]
        assert len(pods) == 1, [p["metadata"]["name"] for p in seen.values()]
        (pod,) = pods
        (container,) = [c for c in pod["spec"]["containers"] if c["image"] == workloads.DEFAULT_RUNNER_IMAGE]
        assert pod["spec"]["nodeName"] == realnode.NODE_NAME
        assert pod["spec"].get("runtimeClassName", "runc") == runtime
        assert pod["spec"].get("automountServiceAccountToken") is False
        env = {e["name"]: e for e in container.get("env", [])}
        assert "ANTHROPIC_API_KEY" not in env, sorted(env)  # the key stayed with the worker and the proxy
        assert "CLAUDE_CODE_OAUTH_TOKEN" not in env, sorted(env)

        log = await node_api.read_log(worker_ns, worker)
        assert run["id"] in log, log[-3000:]
        for secret in (key, admin_key):
            assert secret.reveal() not in log
        print(f"{source}/{runtime}: worker Ready {ready_s:.1f}s; run queued -> succeeded {took:.1f}s")

        async def nothing_left() -> bool:
            return not (await node_api.list(k8s.PODS, agents)).items

        await eventually(nothing_left, limit_s=60, interval_s=0.5, what="the step's pod deleted")
