"""On a real kube-apiserver: PodSecurity ``restricted`` admits everything ironflow renders and
refuses a plain pod; the worker Role of ``examples/k8s/sandbox/namespace-rbac.yaml`` cannot
touch NetworkPolicies, Secrets, attach or port-forward (SubjectAccessReview), execs only for PodRun
stdin, and suffices to run a step.
Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ironflow import errors
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.commands.pod_ups import PodUp, Readiness
from ironflow.k8s.commands.specs import SecuritySpec
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.labels import LABEL_RUN_ID
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import EXIT_CODE_LABEL, KubeEnv

ROOT = Path(__file__).resolve().parents[3]
RBAC = ROOT / "examples" / "k8s" / "sandbox" / "namespace-rbac.yaml"
NAMESPACES = ROOT / "examples" / "k8s" / "sandbox" / "namespace.yaml"
STREAM_TEXT = (ROOT / "tests" / "fixtures" / "claude" / "stream_text.out").read_text()
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
WORKER = "system:serviceaccount:ironflow:ironflow-worker"
AGENTS_NS = "ironflow-agents"


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"psa-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


@pytest.fixture(scope="module")
def worker_rbac(kube_env: KubeEnv) -> str:
    """The example's namespaces (PodSecurity labels as shipped), ServiceAccount, Role and
    RoleBinding; returns the agents namespace."""
    for doc in yaml.safe_load_all(NAMESPACES.read_text()):
        if doc:
            kube_env.create_namespace(doc["metadata"]["name"], labels=doc["metadata"].get("labels"))
    kube_env.apply_objects([d for d in yaml.safe_load_all(RBAC.read_text()) if d])
    return AGENTS_NS


def sar(env: KubeEnv, *, verb: str, resource: str, group: str = "", subresource: str = "") -> bool:
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": WORKER,
            "groups": ["system:serviceaccounts", "system:serviceaccounts:ironflow", "system:authenticated"],
            "resourceAttributes": {
                "namespace": AGENTS_NS,
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
            },
        },
    }
    out = env.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body)
    return bool(out["status"].get("allowed"))


def rendered_agent_objects(ns: str) -> list[dict[str, Any]]:
    """What the sandboxed provider renders: agent pods (plain, large prompt via ConfigMap,
    run-scoped)."""
    p = K8sEphemeralProvider.sandboxed(IMAGE).namespace(ns)
    now = int(time.time())
    docs: list[dict[str, Any]] = []
    for config in (
        AgentConfig("Say hello"),
        AgentConfig("x" * 120_000),
        AgentConfig("Review").scoped("01a0e906-1f85-7000-8000-0000000000aa", "review"),
    ):
        docs += p.manifests(config, now=now, proxy_token=None, worker_env={}, pod_name=None)
    return docs


def hardened_ops(ns: str) -> list[dict[str, Any]]:
    """PodRun / JobRun with every hardening builder they have (non-root, no escalation)."""
    pod_run = PodRun("check", "rust:1.94", "cargo test").namespace(ns).security(SecuritySpec(run_as_user=10001))
    job_run = JobRun("migrate", "postgres:16", "psql -f m.sql").namespace(ns)
    return [
        pod_run.allow_privilege_escalation(False).build_pod(),
        job_run.allow_privilege_escalation(False).build_job(),
    ]


_RESOURCES = {"Pod": k8s.PODS, "ConfigMap": k8s.CONFIGMAPS, "Job": k8s.JOBS}


async def test_everything_the_sandboxed_provider_renders_is_admitted_under_restricted(
    kube_env: KubeEnv, ns: str
) -> None:
    """The real PodSecurity admission (enforce=restricted, latest) accepts every agent object."""
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        for doc in rendered_agent_objects(ns):
            created = await api.create(_RESOURCES[doc["kind"]], ns, doc)
            assert created["metadata"]["uid"]


async def test_restricted_pod_run_and_job_run_are_admitted_and_run_under_restricted(kube_env: KubeEnv, ns: str) -> None:
    """``restricted()`` (§5.1 builders plus drop ALL and seccomp): the real PodSecurity
    admission accepts the pod and the Job's pod, and both run to success."""
    kube_env.set_namespace_log(ns, "ok\n")
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        pod_run = PodRun("check", "rust:1.94", "cargo test").namespace(ns).restricted().label(EXIT_CODE_LABEL, "0")
        out = await pod_run.timeout(30).run(api)
        assert (out.success, out.logs) == (True, "ok\n")
        job_run = JobRun("migrate", "postgres:16", "psql -f m.sql").namespace(ns).restricted()
        out = await job_run.timeout(60).run(api)
        assert out.success, out


async def test_a_service_pod_and_a_pod_run_with_stdin_and_scratch_are_admitted_under_restricted(
    kube_env: KubeEnv, ns: str
) -> None:
    """A ``PodUp`` pod (always restricted) and a restricted ``PodRun`` with its stdin FIFO and a
    scratch volume: the real admission takes both as they are rendered."""
    service = PodUp("db", "postgres:16", "run-1").namespace(ns).port(5432).readiness(Readiness.tcp(5432))
    pod_run = PodRun("feed", IMAGE, "cat").namespace(ns).restricted(read_only_root=True).stdin(b"x")
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        for pod in (service.scratch("/data").build_pod(), pod_run.scratch("/scratch", "64Mi").build_pod()):
            created = await api.create(k8s.PODS, ns, pod)
            assert created["metadata"]["uid"]


async def test_hardened_pod_run_without_restricted_is_refused_under_restricted(kube_env: KubeEnv, ns: str) -> None:
    """The reference's builders alone (non-root, no escalation) still miss drop ALL and seccomp.
    (Only the Pod: enforce applies to pods; a Job is admitted and its pods are refused later.)"""
    pod = hardened_ops(ns)[0]
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        with pytest.raises(errors.KubeForbidden, match="PodSecurity"):
            await api.create(k8s.PODS, ns, pod)


async def test_pod_run_and_job_run_are_admitted_under_baseline(kube_env: KubeEnv) -> None:
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    with kube_env.namespace(f"baseline-{uuid.uuid4().hex[:8]}", labels=labels) as ns:
        async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
            for doc in hardened_ops(ns):
                assert (await api.create(_RESOURCES[doc["kind"]], ns, doc))["metadata"]["uid"]


async def test_plain_pod_is_refused_by_pod_security(kube_env: KubeEnv, ns: str) -> None:
    """A pod without the sandbox's securityContext violates ``restricted``: 403 naming PodSecurity."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], "restartPolicy": "Never"},
    }
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        with pytest.raises(errors.KubeForbidden) as info:
            await api.create(k8s.PODS, ns, pod)
    assert "PodSecurity" in str(info.value)


@pytest.mark.parametrize(
    ("verb", "resource", "group", "subresource", "allowed"),
    [
        ("create", "networkpolicies", "networking.k8s.io", "", False),
        ("delete", "networkpolicies", "networking.k8s.io", "", False),
        ("get", "secrets", "", "", False),
        ("create", "pods", "", "exec", True),  # PodRun stdin
        ("get", "pods", "", "exec", True),  # its websocket upgrade
        ("create", "pods", "", "attach", False),
        ("create", "pods", "", "portforward", False),
        ("create", "pods", "", "", True),
        ("watch", "pods", "", "", True),
        ("get", "pods", "", "log", True),
        ("create", "configmaps", "", "", True),
        ("delete", "jobs", "batch", "", True),
    ],
)
def test_worker_role_grants_exactly_what_the_runtime_needs(
    kube_env: KubeEnv, worker_rbac: str, verb: str, resource: str, group: str, subresource: str, allowed: bool
) -> None:
    """SubjectAccessReview against the real RBAC authorizer, for the worker ServiceAccount."""
    assert sar(kube_env, verb=verb, resource=resource, group=group, subresource=subresource) is allowed


async def test_a_step_runs_with_only_the_worker_service_account_token(kube_env: KubeEnv, worker_rbac: str) -> None:
    """The Role suffices: create, watch, read the log and delete, all as ironflow-worker."""
    token = kube_env.service_account_token("ironflow", "ironflow-worker")
    kube_env.set_namespace_log(worker_rbac, STREAM_TEXT)
    p = K8sEphemeralProvider.sandboxed(IMAGE).namespace(worker_rbac).timeout(30).cluster(kube_env.token_config(token))
    config = dataclasses.replace(AgentConfig("Say hello").pod_label(EXIT_CODE_LABEL, "0"), verbose=True)
    async with p:
        result = await p.run(config)
    assert result.text


async def test_release_run_and_reaper_work_with_the_worker_token(kube_env: KubeEnv, worker_rbac: str) -> None:
    """release_run deletes the run's pods and prompt ConfigMaps and waits for them; the reaper
    lists and deletes expired objects; both as ironflow-worker in the restricted namespace."""
    token = kube_env.service_account_token("ironflow", "ironflow-worker")
    run = f"01a0e906-1f85-7000-8000-{uuid.uuid4().hex[:12]}"
    p = K8sEphemeralProvider.sandboxed(IMAGE).namespace(worker_rbac).timeout(30).cluster(kube_env.token_config(token))
    now = int(time.time())
    held = p.manifests(AgentConfig("x" * 120_000).scoped(run, "held"), now=now, proxy_token=None, worker_env={})
    expired = p.manifests(AgentConfig("old"), now=now - 100_000, proxy_token=None, worker_env={})
    async with await k8s.KubeApi.connect(kube_env.token_config(token)) as api:
        for doc in [*held, *expired]:
            await api.create(_RESOURCES[doc["kind"]], worker_rbac, doc)
        assert await p.release_run(run) == 1
        selector = f"{LABEL_RUN_ID}={run}"
        assert (await api.list(k8s.PODS, worker_rbac, label_selector=selector)).items == []
        assert (await api.list(k8s.CONFIGMAPS, worker_rbac, label_selector=selector)).items == []
        report = await p.reap_orphans()
        await p.aclose()
        assert report.pods == (expired[-1]["metadata"]["name"],)
