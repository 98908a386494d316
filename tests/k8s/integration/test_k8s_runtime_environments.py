"""Persistent environment claims on the Kubernetes API test server (§1.4 step 13, §1.12).

A step with an environment volume creates its claim before the pod and returns its id;
the next step resumes it (the expiry restarts); a resumed id that is missing, being
deleted or not an ironflow environment fails the step with the reference's message and
leaves nothing behind. A failure before the pod revokes the step's proxy token (the real
auth proxy) and deletes the prompt ConfigMap; a pod the API refused takes the claim this
step created with it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.kubecase import KubeCase, hold_create_answers

from ironflow import errors, labels
from ironflow.auth_proxy import AdminClient
from ironflow.auth_proxy import app as proxy_app
from ironflow.auth_proxy import config as proxy_config
from ironflow.k8s.environments import EnvironmentVolume
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.k8s_validate import validate_manifest
from ironflow.testing.kube import KubeTestServer, PodScript

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
JSON_TEXT = (FIXTURES / "json_text.out").read_text()
RUN = "01a0e906-1f85-7000-8000-0000000000ee"
WEEK = 7 * 24 * 3600
ADMIN_KEY = "e" * 40
ACCOUNT = AccountLease("acct-1", "ANTHROPIC_API_KEY", Secret("sk-ant-api03-" + "k" * 20))


def provider(ns: str) -> K8sEphemeralProvider:
    return (
        K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
        .namespace(ns)
        .timeout(5)
        .environment_volume(EnvironmentVolume("/workspace", size="1Gi"))
    )


def runner(kube: KubeCase, p: K8sEphemeralProvider | None = None, **kwargs: Any) -> StepRunner:
    return StepRunner.of((p or provider(kube.namespace)).settings, api=kube.api, worker_env={}, **kwargs)


def names(server: KubeTestServer, resource: k8s.Resource, ns: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in server.objects(resource, ns))


def expiry(server: KubeTestServer, ns: str, name: str) -> int:
    claim = server.get_object(k8s.PERSISTENTVOLUMECLAIMS, ns, name)
    assert claim is not None
    return int(claim["metadata"]["annotations"][labels.ANNOTATION_EXPIRES_AT])


def mounted_claims(server: KubeTestServer, ns: str, created: list[dict[str, Any]]) -> list[str]:
    pod = next(o for o in created if o["kind"] == "Pod")
    return [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]


def spy_creates(api: k8s.KubeApi) -> list[dict[str, Any]]:
    created: list[dict[str, Any]] = []
    original = api.create

    async def spy(resource: k8s.Resource, namespace: str | None, body: Any) -> dict[str, Any]:
        created.append(body)
        return await original(resource, namespace, body)

    api.create = spy  # type: ignore[method-assign]
    return created


async def test_a_step_creates_a_claim_and_the_next_step_resumes_it(kube: KubeCase, server: KubeTestServer) -> None:
    ns = kube.namespace
    server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
    created = spy_creates(kube.api)
    before = int(time.time())
    first = await runner(kube).run(AgentConfig("Set up").scoped(RUN, "setup"))
    env_id = first.environment_id
    assert env_id is not None
    assert env_id.startswith("ironflow-env-")
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, ns) == [env_id]
    claim = server.get_object(k8s.PERSISTENTVOLUMECLAIMS, ns, env_id)
    assert claim is not None
    assert claim["metadata"]["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_ENVIRONMENT
    assert claim["metadata"]["labels"][labels.LABEL_STEP] == "setup"
    assert before + WEEK <= expiry(server, ns, env_id) <= int(time.time()) + WEEK
    assert [o["kind"] for o in created] == ["PersistentVolumeClaim", "Pod"]
    for obj in created:
        validate_manifest(obj)
    assert mounted_claims(server, ns, created) == [env_id]

    # the second step resumes it: no new claim, the same one mounted, the expiry refreshed
    await kube.api.patch(
        k8s.PERSISTENTVOLUMECLAIMS, ns, env_id, {"metadata": {"annotations": {labels.ANNOTATION_EXPIRES_AT: "5"}}}
    )
    created.clear()
    second = await runner(kube).run(AgentConfig("Go on").scoped(RUN, "build").resume_environment(env_id))
    assert second.environment_id == env_id
    assert second.text == "Hello from the fake model."
    assert [o["kind"] for o in created] == ["Pod"]
    assert mounted_claims(server, ns, created) == [env_id]
    assert expiry(server, ns, env_id) >= before + WEEK
    assert names(server, k8s.PODS, ns) == []
    assert names(server, k8s.CONFIGMAPS, ns) == []
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, ns) == [env_id]


async def test_a_step_cancelled_while_its_new_claims_create_answer_is_in_flight_deletes_the_claim(
    kube: KubeCase, server: KubeTestServer
) -> None:
    """The claim exists on the server but its create has not returned: it holds nothing yet and goes."""
    sent = hold_create_answers(kube.api, k8s.PERSISTENTVOLUMECLAIMS)
    task = asyncio.ensure_future(runner(kube).run(AgentConfig("Set up").scoped(RUN, "setup")))
    await sent.wait()
    assert len(names(server, k8s.PERSISTENTVOLUMECLAIMS, kube.namespace)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, kube.namespace) == []
    assert names(server, k8s.PODS, kube.namespace) == []


async def test_invoke_with_logs_also_returns_the_environment_id(kube: KubeCase, server: KubeTestServer) -> None:
    stream = (FIXTURES / "stream_text.out").read_text()
    server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=stream))

    class Sink:
        def log(self, stream: str, line: str) -> None:
            pass

    result = await runner(kube).run(AgentConfig("hi"), logs=Sink())
    assert result.environment_id in names(server, k8s.PERSISTENTVOLUMECLAIMS, kube.namespace)


def foreign_claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "labels": {"team": "data"}, "annotations": {labels.ANNOTATION_EXPIRES_AT: "7"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


async def deleting_claim(kube: KubeCase, name: str) -> None:
    body = foreign_claim(name)
    body["metadata"]["labels"] = {
        labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
        labels.LABEL_COMPONENT: labels.COMPONENT_ENVIRONMENT,
    }
    body["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection"]
    await kube.api.create(k8s.PERSISTENTVOLUMECLAIMS, kube.namespace, body)
    await kube.api.delete(k8s.PERSISTENTVOLUMECLAIMS, kube.namespace, name)


@pytest.mark.parametrize("case", ["missing", "deleting", "foreign"])
async def test_a_resumed_environment_that_is_not_live_fails_the_step(
    kube: KubeCase, server: KubeTestServer, case: str
) -> None:
    ns = kube.namespace
    env_id = f"env-{case}"
    if case == "foreign":
        await kube.api.create(k8s.PERSISTENTVOLUMECLAIMS, ns, foreign_claim(env_id))
    elif case == "deleting":
        await deleting_claim(kube, env_id)
    claims_before = names(server, k8s.PERSISTENTVOLUMECLAIMS, ns)
    server.reset_requests()
    with pytest.raises(errors.StepConfigError, match=f"^environment '{env_id}' not found or expired$"):
        await runner(kube).run(AgentConfig("x" * 120_000).scoped(RUN, "s").resume_environment(env_id))
    assert server.count("create", "pods") == 0
    assert server.count("patch", "persistentvolumeclaims") == 0
    assert names(server, k8s.PODS, ns) == []
    assert names(server, k8s.CONFIGMAPS, ns) == []
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, ns) == claims_before
    if case == "foreign":
        assert expiry(server, ns, env_id) == 7  # not touched


async def test_a_pod_the_api_refuses_deletes_the_claim_this_step_created(
    kube: KubeCase, server: KubeTestServer
) -> None:
    server.fail("create", "pods", status=422)
    with pytest.raises(errors.KubernetesError, match="failed to create K8s pod"):
        await runner(kube).run(AgentConfig("hi").scoped(RUN, "s"))
    assert server.count("create", "persistentvolumeclaims") == 1
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, kube.namespace) == []


async def test_a_pod_the_api_refuses_keeps_a_resumed_claim(kube: KubeCase, server: KubeTestServer) -> None:
    server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
    env_id = (await runner(kube).run(AgentConfig("hi"))).environment_id
    assert env_id is not None
    server.fail("create", "pods", status=422)
    with pytest.raises(errors.KubernetesError, match="failed to create K8s pod"):
        await runner(kube).run(AgentConfig("hi").resume_environment(env_id))
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, kube.namespace) == [env_id]


async def test_a_claim_failure_revokes_the_token_and_deletes_the_prompt(kube: KubeCase, server: KubeTestServer) -> None:
    """With the real auth proxy: the step's token is revoked, nothing is left in the namespace."""
    ns = kube.namespace
    server.fail("create", "persistentvolumeclaims", status=403)
    config = proxy_config.AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream="http://127.0.0.1:9")
    async with proxy_app.run_auth_proxy(config) as running, AdminClient(running.url, ADMIN_KEY) as admin:
        p = provider(ns).auth_proxy(running.url)
        step = AgentConfig("x" * 120_000).scoped(RUN, "s").account_lease(ACCOUNT)
        with pytest.raises(errors.KubeForbidden, match="failed to create environment claim 'ironflow-env-"):
            await runner(kube, p, issuer=admin).run(step)
        assert await admin.revoke_run(RUN) == 0  # the step's token was already revoked
    assert server.count("create", "configmaps") == 1
    assert server.count("create", "pods") == 0
    for resource in (k8s.PODS, k8s.CONFIGMAPS, k8s.PERSISTENTVOLUMECLAIMS):
        assert names(server, resource, ns) == []


async def test_resume_without_environment_volume_fails_before_anything_exists(
    kube: KubeCase, server: KubeTestServer
) -> None:
    plain = K8sEphemeralProvider.sandboxed("img").namespace(kube.namespace)
    server.reset_requests()
    with pytest.raises(
        errors.StepConfigError, match=r"resume_environment needs K8sEphemeralProvider\.environment_volume"
    ):
        await runner(kube, plain).run(AgentConfig("hi").resume_environment("ironflow-env-1-2"))
    assert [r for r in server.requests if r.verb in ("create", "patch", "delete")] == []


async def test_a_short_ttl_claim_never_expires_under_its_running_pod(kube: KubeCase, server: KubeTestServer) -> None:
    server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
    p = provider(kube.namespace).environment_volume(EnvironmentVolume("/workspace", ttl=timedelta(seconds=1)))
    before = int(time.time())
    env_id = (await runner(kube, p).run(AgentConfig("hi"))).environment_id
    assert env_id is not None
    assert expiry(server, kube.namespace, env_id) >= before + 5 + 60  # timeout + margin


async def test_release_run_keeps_the_environment_claims_of_the_run(kube: KubeCase, server: KubeTestServer) -> None:
    """Environments outlive their run on purpose (a later run may resume them); the reaper ends them."""
    server.script_pods(PodScript(name_prefix="claude-code", run_for=0.05, log=JSON_TEXT))
    env_id = (await runner(kube).run(AgentConfig("hi").scoped(RUN, "s"))).environment_id
    await runner(kube).release_run(RUN)
    assert names(server, k8s.PERSISTENTVOLUMECLAIMS, kube.namespace) == [env_id]
