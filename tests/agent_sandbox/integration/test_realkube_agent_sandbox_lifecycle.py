"""Suspend/resume, pool status, the pool's HPA and scale subresource, wait and install, on the REAL
agent-sandbox controller (v1.0.3, ``--extensions``) and a real kube-apiserver, kwok as the kubelet.

The commands run as a user runs them (``ironflow sandbox …`` with ``--kubeconfig``); the test
reads the cluster directly to check what they did. Skipped when the control-plane binaries are
not built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tests.fakes import agent_sandbox_gc
from tests.fakes.kubelet import manual_namespace
from tests.fakes.sandbox_cli import run_sandbox

from ironflow.agent_sandbox import catalog, claims, install, lifecycle, patterns
from ironflow.kube import api as k8s
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually, eventually_sync

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
RES = claims.resources()
SETTLE_S = 60.0


def _path(resource: k8s.Resource, ns: str | None, name: str | None = None, sub: str | None = None) -> str:
    return resource.path(ns, name, sub)


def _get(env: KubeEnv, resource: k8s.Resource, ns: str, name: str | None = None) -> dict[str, Any]:
    return env.request("GET", _path(resource, ns, name))


def _until(check: Any, what: str, limit: float = SETTLE_S) -> None:
    eventually_sync(check, limit_s=limit, interval_s=0.2, what=what)


def _cli(env: KubeEnv, *args: str) -> tuple[int, str, str]:
    return run_sandbox(*args, "--kubeconfig", str(env.kubeconfig_path))


@pytest.fixture(scope="module")
def gc_ready(kube_env: KubeEnv) -> None:
    """The garbage collector cascades through agent-sandbox objects (see agent_sandbox_gc)."""
    with kube_env.namespace(f"gc-{uuid.uuid4().hex[:8]}") as ns:
        agent_sandbox_gc.wait_for_claim_cascade(kube_env, ns)


@pytest.fixture
def ns(kube_env: KubeEnv, gc_ready: None) -> Iterator[str]:
    with kube_env.namespace(f"life-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


def _pods_of(env: KubeEnv, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in _get(env, k8s.PODS, ns)["items"]}


def _pvc_uids(env: KubeEnv, ns: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in _get(env, k8s.PERSISTENTVOLUMECLAIMS, ns)["items"]}


def _ready(obj: dict[str, Any]) -> bool:
    return claims.has_condition(obj, "Ready")


def test_suspend_and_resume_a_raw_sandbox_keep_its_pvcs(kube_env: KubeEnv, ns: str) -> None:
    """suspend: the pod goes, the Sandbox and its sibling PVCs stay; resume: a new pod on the same PVCs."""
    docs = catalog.render_pattern("standalone-pvc", patterns.PatternOptions(namespace=ns, name="keep"))
    kube_env.provide_volumes(2)
    kube_env.apply_objects(docs, namespace=ns)
    _until(lambda: _ready(_get(kube_env, RES.sandboxes, ns, "keep")), "sandbox keep to be Ready")
    first = _pods_of(kube_env, ns)["keep"]["metadata"]["uid"]
    pvcs = _pvc_uids(kube_env, ns)
    assert set(pvcs) == {"keep-workspace", "keep-memory"}

    code, out, err = _cli(kube_env, "suspend", "keep", "-n", ns, "--timeout", "60s")
    assert code == 0, err
    assert out.strip() == "sandbox/keep suspended"
    sandbox = _get(kube_env, RES.sandboxes, ns, "keep")
    assert sandbox["spec"]["operatingMode"] == "Suspended"
    assert claims.has_condition(sandbox, "Suspended")  # the controller's word: the pod terminated
    assert "keep" not in _pods_of(kube_env, ns)
    assert _pvc_uids(kube_env, ns) == pvcs

    code, out, err = _cli(kube_env, "resume", "keep", "-n", ns, "--timeout", "60s", "-o", "json")
    assert code == 0, err
    assert json.loads(out) == {"sandbox": "keep", "claim": None, "state": "resumed"}
    assert _ready(_get(kube_env, RES.sandboxes, ns, "keep"))
    again = _pods_of(kube_env, ns)["keep"]
    assert again["metadata"]["uid"] != first
    assert _pvc_uids(kube_env, ns) == pvcs
    mounted = {
        v["persistentVolumeClaim"]["claimName"] for v in again["spec"]["volumes"] if "persistentVolumeClaim" in v
    }
    assert mounted == set(pvcs)


def _warm_pool(kube_env: KubeEnv, ns: str, *extra: str) -> list[dict[str, Any]]:
    """The warm-pool pattern (template, pool of 2, one claim) rendered by the CLI, applied, the claim Ready."""
    code, out, err = run_sandbox("render", "warm-pool", "--name", "pool", "-n", ns, *extra)
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d]
    kube_env.provide_volumes(6)
    # The claim after the pool is ready: one applied with it may find no member ready and get a
    # sandbox of its own (under load it did), where the tests below need an adopted member.
    kube_env.apply_objects([d for d in docs if d.get("kind") != "SandboxClaim"], namespace=ns)
    _until(
        lambda: _get(kube_env, RES.pools, ns, "pool").get("status", {}).get("readyReplicas", 0) >= 2,
        "the warm pool's members to be ready",
    )
    kube_env.apply_objects([d for d in docs if d.get("kind") == "SandboxClaim"], namespace=ns)
    _until(lambda: _ready(_get(kube_env, RES.claims, ns, "pool-run")), "claim pool-run to be Ready")
    return docs


def test_a_claims_sandbox_suspends_and_resumes_and_the_pool_counts_its_adoption(kube_env: KubeEnv, ns: str) -> None:
    _warm_pool(kube_env, ns)
    sandbox = claims.bound_sandbox(_get(kube_env, RES.claims, ns, "pool-run"))
    assert sandbox is not None
    assert sandbox != "pool-run"  # adopted: a pool member's generated name

    def pool_reads(want: dict[str, Any]) -> bool:
        code, out, _ = _cli(kube_env, "pools", "-n", ns, "-o", "json")
        return code == 0 and json.loads(out) == [want]

    full = {"name": "pool", "namespace": ns, "template": "pool", "desired": 2, "replicas": 2, "ready": 2}
    _until(lambda: pool_reads({**full, "adoptedLastHour": 1}), "the pool to read 2 ready and 1 adopted")
    code, out, _ = _cli(kube_env, "pools", "-n", ns)
    assert code == 0
    assert out.split("\n")[1].split() == ["pool", "pool", "2", "2", "2", "1"]

    pvcs = {n: u for n, u in _pvc_uids(kube_env, ns).items() if n.endswith(sandbox)}
    assert pvcs  # the template's volumeClaimTemplates, now the adopted Sandbox's
    code, out, err = _cli(kube_env, "suspend", "pool-run", "-n", ns, "--timeout", "60s")
    assert code == 0, err
    assert out.strip() == f"sandbox/{sandbox} (claim pool-run) suspended"
    assert not [p for p in _pods_of(kube_env, ns).values() if p["metadata"]["name"] == sandbox]
    assert {n: u for n, u in _pvc_uids(kube_env, ns).items() if n in pvcs} == pvcs
    code, _, err = _cli(kube_env, "resume", "pool-run", "-n", ns, "--timeout", "60s")
    assert code == 0, err
    assert _ready(_get(kube_env, RES.sandboxes, ns, sandbox))
    _until(lambda: _ready(_get(kube_env, RES.claims, ns, "pool-run")), "the claim to be Ready again")
    assert {n: u for n, u in _pvc_uids(kube_env, ns).items() if n in pvcs} == pvcs


def test_the_rendered_hpa_is_accepted_and_its_target_resolves_through_the_scale_subresource(
    kube_env: KubeEnv, ns: str
) -> None:
    docs = _warm_pool(kube_env, ns, "--autoscale", "1:3", "--autoscale-by", "cpu")
    (hpa,) = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    hpas = k8s.Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
    assert _get(kube_env, hpas, ns, "pool")["spec"]["scaleTargetRef"] == hpa["spec"]["scaleTargetRef"]

    async def scale() -> tuple[dict[str, Any], dict[str, Any]]:
        async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
            read = await api.get(RES.pools, ns, "pool", subresource="scale")
            written = await api.patch(RES.pools, ns, "pool", {"spec": {"replicas": 3}}, subresource="scale")
            return read, written

    read, written = asyncio.run(scale())
    assert read["kind"] == "Scale"
    assert read["spec"]["replicas"] == 2
    assert read["status"]["selector"]  # labelSelectorPath .status.selector: what the HPA measures
    assert written["spec"]["replicas"] == 3
    assert _get(kube_env, RES.pools, ns, "pool")["spec"]["replicas"] == 3  # specReplicasPath
    _until(lambda: _get(kube_env, RES.pools, ns, "pool").get("status", {}).get("replicas") == 3, "a third member")

    # kube-controller-manager's HPA controller reads the same /scale: AbleToScale (no metrics-server
    # here, so it cannot compute CPU, and says so in ScalingActive).
    def able() -> bool:
        got = _get(kube_env, hpas, ns, "pool")
        cond = claims.condition(got, "AbleToScale") or {}
        return cond.get("status") == "True" and cond.get("reason") == "SucceededGetScale"

    _until(able, "the HPA controller to get the pool's scale", limit=90)


async def test_wait_returns_when_a_raw_sandbox_finishes(kube_env: KubeEnv) -> None:
    """``sandbox wait NAME --for condition=Finished`` on the watch; the pod ends as a kubelet would say."""
    async with manual_namespace(kube_env) as (api, ns, control):
        docs = catalog.render_pattern("ephemeral", patterns.PatternOptions(namespace=ns, name="job"))
        await asyncio.to_thread(kube_env.apply_objects, docs, namespace=ns)
        await eventually(lambda: _has_pod(api, ns, "job"), limit_s=SETTLE_S, interval_s=0.2)

        code, _, err = await asyncio.to_thread(
            _cli, kube_env, "wait", "job", "-n", ns, "--for", "condition=Finished", "--timeout", "1s"
        )
        assert code == 3, "not finished yet: the wait times out"
        assert "condition Finished=True" in err

        waiting = asyncio.create_task(
            asyncio.to_thread(
                _cli, kube_env, "wait", "job", "-n", ns, "--for", "condition=Finished", "--timeout", "60s"
            )
        )
        await control.set_pod_phase(ns, "job", "Running")
        await control.set_pod_phase(ns, "job", "Succeeded", exit_code=0, reason="Completed")
        code, out, err = await waiting
        assert code == 0, err
        assert out.strip() == "sandbox/job condition met"
        assert claims.has_condition(await api.get(RES.sandboxes, ns, "job"), "Finished")

        code, _, err = await asyncio.to_thread(_cli, kube_env, "wait", "nope", "-n", ns, "--for", "condition=Finished")
        assert code == 3
        assert "nope" in err
        assert len(err.strip().splitlines()) == 1


async def _has_pod(api: k8s.KubeApi, ns: str, name: str) -> bool:
    try:
        await api.get(k8s.PODS, ns, name)
    except Exception:
        return False
    return True


def test_install_applies_the_pinned_controller_server_side_and_again_changes_nothing(kube_env: KubeEnv) -> None:
    system = "agent-sandbox-system"
    try:
        code, out, err = _cli(kube_env, "install", "--apply", "-o", "json")
        assert code == 0, err
        first = json.loads(out)
        assert [r["kind"] for r in first] == [o["kind"] for o in install.controller_objects()]
        deployments = k8s.Resource("apps", "v1", "deployments", "Deployment")
        deployment = _get(kube_env, deployments, system, "agent-sandbox-controller")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == install.DEFAULT_IMAGE
        assert "--extensions" in container["args"]
        managers = {m["manager"] for m in deployment["metadata"]["managedFields"]}
        assert install.FIELD_MANAGER in managers
        code, out, err = _cli(kube_env, "install", "--apply")
        assert code == 0, err
        assert all(line.endswith(" unchanged") for line in out.strip().splitlines()), out
    finally:  # the cluster's own controller keeps running; only what install added goes (best effort)
        for obj in reversed(install.controller_objects()):
            if obj["kind"] in ("CustomResourceDefinition", "Namespace"):
                continue
            resource = install.RESOURCES[obj["kind"]]
            namespace = obj["metadata"].get("namespace") if resource.namespaced else None
            with contextlib.suppress(Exception):
                kube_env.request("DELETE", resource.path(namespace, obj["metadata"]["name"]))
        with contextlib.suppress(Exception):
            kube_env.request("DELETE", k8s.NAMESPACES.path(None, system))


def test_pool_status_reads_nothing_in_an_empty_namespace(kube_env: KubeEnv, ns: str) -> None:
    code, out, err = _cli(kube_env, "pools", "-n", ns, "-o", "yaml")
    assert code == 0, err
    assert yaml.safe_load(out) == []
    assert lifecycle.ADOPTION_WINDOW_S == 3600
