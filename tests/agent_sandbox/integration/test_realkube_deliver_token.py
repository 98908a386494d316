"""``ironflow sandbox deliver-token`` as a user runs it after ``kubectl apply``, on the REAL
agent-sandbox controller (v1.0.3) and, for concept 07, the real KRO controller (v0.9.4); a real
kube-apiserver, kwok as the kubelet and the exec (run on this host, ``HOME`` the test's dir, as
the pod's emptyDir home would be), a real auth proxy in front of the offline model.

The command (in-process, ``tests/fakes/sandbox_cli.py``) waits for the pod the controllers
made, issues a token through the proxy's admin API and writes it over a real exec: the token
lands in the waiting agent's token file, the proxy takes it, and no object of the cluster,
namespaced or not, holds it. Skipped when the real tier (or ``kro-controller``) is not built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
import yaml
from tests.fakes import kubelet
from tests.fakes.kro_controller import KroEnv, apply_rgd
from tests.fakes.sandbox_cli import run_sandbox

from ironflow.agent_sandbox import catalog, claims, deliveries, patterns
from ironflow.auth_proxy.admin_client import ADMIN_KEY_ENV
from ironflow.auth_proxy.app import run_auth_proxy
from ironflow.auth_proxy.config import AuthProxyConfig
from ironflow.fake_model.server import FakeAnthropic
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.secrets import Secret, find_leaks
from ironflow.testing.kubeenv import KubeEnv, KubeEnvError
from ironflow.testing.polling import eventually_sync

RESTRICTED: Final = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
ADMIN_KEY: Final = "d" * 40
UPSTREAM_KEY: Final = "sk-ant-api03-" + "u" * 24
IMAGE: Final = "ghcr.io/acme/claude-runner:1"
#: The KRO graphs under kinds of their own: test_realkro_patterns applies the unproxied ones to
#: the same cluster, and a kind is cluster-wide.
KINDS: Final = {"ClaudeCodeAgentSandbox": "ProxiedAgentSandbox", "ClaudeCodeAgentTemplate": "ProxiedAgentTemplate"}


@pytest.fixture
async def proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A real auth proxy in front of the offline model; the CLI's environment has its admin key
    and the upstream credential a token is issued for (as a user's shell would)."""
    async with contextlib.AsyncExitStack() as stack:
        fake = await stack.enter_async_context(FakeAnthropic(required_credential=UPSTREAM_KEY))
        running = await stack.enter_async_context(
            run_auth_proxy(AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream=fake.url))
        )
        monkeypatch.setenv(ADMIN_KEY_ENV, ADMIN_KEY)
        monkeypatch.setenv("ANTHROPIC_API_KEY", UPSTREAM_KEY)
        monkeypatch.delenv("CLAUDE_CODE_OAUTH_TOKEN", raising=False)
        yield running.url


@contextlib.contextmanager
def exec_namespace(kube: KubeEnv, work: Path) -> Iterator[tuple[str, Path]]:
    """A restricted namespace whose pods kwok runs and execs here; yields it and the pods' HOME."""
    home = work / "home"
    home.mkdir()
    with kube.namespace(f"dlv-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as ns:
        kube.allow_exec(ns, work, {"HOME": str(home)})
        yield ns, home


def provider_file(tmp_path: Path, ns: str, proxy_url: str) -> Path:
    path = tmp_path / "pod.yaml"
    settings = {"image": IMAGE, "sandboxed": True, "namespace": ns, "auth_proxy": proxy_url}
    path.write_text(yaml.safe_dump(settings))
    return path


def every_object(kube: KubeEnv, ns: str) -> list[dict[str, Any]]:
    """Every object the apiserver lists: the namespace's of each namespaced kind, all of each
    cluster-wide kind (found through discovery, so a kind nobody thought of is searched too)."""
    versions = ["/api/v1"]
    for group in kube.request("GET", "/apis")["groups"]:
        versions.append(f"/apis/{group['preferredVersion']['groupVersion']}")
    found: list[dict[str, Any]] = []
    for prefix in versions:
        for r in kube.request("GET", prefix)["resources"]:
            if "/" in r["name"] or "list" not in r.get("verbs", []):
                continue
            path = f"{prefix}/namespaces/{ns}/{r['name']}" if r["namespaced"] else f"{prefix}/{r['name']}"
            with contextlib.suppress(KubeEnvError):  # a kind whose list is refused even to the admin
                found.extend(kube.request("GET", path).get("items") or [])
    return found


async def messages_status(base_url: str, token: str) -> int:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {token}", "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http, http.post(f"{base_url}/v1/messages", json=body, headers=headers) as r:
        return r.status


async def deliver(kube: KubeEnv, *args: str) -> str:
    """``ironflow sandbox deliver-token ARGS… --kubeconfig``; its one line of output."""
    code, out, err = await asyncio.to_thread(
        run_sandbox, "deliver-token", *args, "--kubeconfig", str(kube.kubeconfig_path), "--timeout", "60s"
    )
    assert code == 0, err
    (line,) = out.strip().splitlines()
    return line


async def assert_delivered(kube: KubeEnv, ns: str, home: Path, proxy_url: str, line: str, sandbox: str) -> None:
    """The token is in the agent's file (0600), the proxy takes it, and it is nowhere else (the
    command's line included)."""
    token_file = home / deliveries.TOKEN_DIR / deliveries.PROXY_TOKEN_FILE
    token = token_file.read_text()
    assert token.startswith("ifap_")
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert token not in line
    assert await messages_status(proxy_url, token) == 200
    objects = await asyncio.to_thread(every_object, kube, ns)
    assert len([o for o in objects if o["metadata"].get("name") == sandbox]) >= 2  # its Sandbox and pod were searched
    assert find_leaks([token], objects) == []


async def test_deliver_token_gives_an_applied_ephemeral_sandbox_its_token(
    kube_env: KubeEnv, tmp_path: Path, proxy: str
) -> None:
    with exec_namespace(kube_env, tmp_path) as (ns, home):
        settings = provider_file(tmp_path, ns, proxy)
        code, rendered, err = run_sandbox("render", "ephemeral", "--name", "eph", "--provider", str(settings))
        assert code == 0, err
        assert "ifap_" not in rendered
        await asyncio.to_thread(kube_env.apply_objects, list(yaml.safe_load_all(rendered)), namespace=ns)
        line = await deliver(kube_env, "eph", "--provider", str(settings))
        assert line.startswith("sandbox/eph: proxy token delivered (token id ")
        await assert_delivered(kube_env, ns, home, proxy, line, "eph")
        pod = kube_env.request("GET", f"/api/v1/namespaces/{ns}/pods/eph")
        assert [o["kind"] for o in pod["metadata"]["ownerReferences"]] == ["Sandbox"]  # the controller's pod
        assert pod["spec"]["containers"][0]["command"][-1].startswith(deliveries.token_wait_prefix(proxy))


def proxied_graphs(pattern: str, pod: K8sEphemeralProvider) -> list[dict[str, Any]]:
    """A KRO pattern's graphs behind the proxy, under the kinds of :data:`KINDS`."""
    text = json.dumps(catalog.render_pattern(pattern, patterns.PatternOptions(provider=pod)))
    for old, new in KINDS.items():
        text = text.replace(old, new).replace(old.lower(), new.lower())
    rgds: list[dict[str, Any]] = json.loads(text)
    return rgds


@contextlib.asynccontextmanager
async def graphs(kro: KroEnv, pattern: str, settings: Path) -> AsyncIterator[None]:
    """The pattern's proxied graphs, applied and Ready for the test, deleted afterwards."""
    rgds = proxied_graphs(pattern, K8sEphemeralProvider.from_file(settings))
    try:
        for rgd in rgds:
            await asyncio.to_thread(apply_rgd, kro, rgd)
        yield
    finally:
        for rgd in reversed(rgds):
            with contextlib.suppress(KubeEnvError):
                path = f"/apis/kro.run/v1alpha1/resourcegraphdefinitions/{rgd['metadata']['name']}"
                await asyncio.to_thread(kro.kube.request, "DELETE", path)


async def create_instance(kube: KubeEnv, ns: str, kind: str, plural: str, **spec: Any) -> str:
    """A KRO instance named ``job``; returns its path (for deleting it)."""
    doc = {"apiVersion": "kro.run/v1alpha1", "kind": kind, "metadata": {"name": "job"}, "spec": spec}
    await asyncio.to_thread(kube.apply_objects, [doc], namespace=ns)
    return f"/apis/kro.run/v1alpha1/namespaces/{ns}/{plural}/job"


def sandboxes_gone(kube: KubeEnv, ns: str) -> None:
    eventually_sync(
        lambda: not kube.request("GET", claims.resources().sandboxes.path(ns))["items"],
        limit_s=60,
        interval_s=0.2,
        what="the instance's Sandboxes to go with it",
    )


async def test_deliver_token_gives_a_kro_raw_instances_sandbox_its_token(
    kro_env: KroEnv, tmp_path: Path, proxy: str
) -> None:
    """Concept 07 mode 1: KRO makes the Runner and its Sandbox, the agent-sandbox controller the
    pod; ``deliver-token INSTANCE`` (run before the Sandbox exists) reaches the pod of the Sandbox
    named after the instance."""
    kube = kro_env.kube
    with exec_namespace(kube, tmp_path) as (ns, home):
        settings = provider_file(tmp_path, ns, proxy)
        async with graphs(kro_env, "kro-raw", settings):
            await asyncio.to_thread(kube.provide_volumes, 2)  # the instance's workspace and memory PVCs
            instance = await create_instance(
                kube, ns, KINDS["ClaudeCodeAgentSandbox"], "proxiedagentsandboxes", prompt="hello", storage="1Gi"
            )
            line = await deliver(kube, "job", "--provider", str(settings))
            assert line.startswith("sandbox/job: proxy token delivered (token id ")
            await assert_delivered(kube, ns, home, proxy, line, "job")
            sandbox = kube.request("GET", claims.resources().sandboxes.path(ns, "job"))
            assert sandbox["metadata"]["labels"]["kro.run/instance-id"]  # KRO's Sandbox, not one we made
            pod_spec = sandbox["spec"]["podTemplate"]["spec"]
            assert pod_spec["containers"][0]["command"][-1].startswith(deliveries.token_wait_prefix(proxy))
            kube.request("DELETE", instance)
            await asyncio.to_thread(sandboxes_gone, kube, ns)


async def test_deliver_token_gives_a_kro_template_claims_adopted_sandbox_its_token(
    kro_env: KroEnv, tmp_path: Path, proxy: str
) -> None:
    """Concept 08 mode 1: KRO makes the template, the pool and the claim ``<name>-run`` (a moment
    after the instance: ``--claim`` waits for it); the controller binds it to a Sandbox (a warm
    member, or a cold start while the pool is not ready yet); ``deliver-token`` reaches its pod."""
    kube = kro_env.kube
    with exec_namespace(kube, tmp_path) as (ns, home):
        settings = provider_file(tmp_path, ns, proxy)
        async with graphs(kro_env, "kro-template", settings):
            instance = await create_instance(
                kube, ns, KINDS["ClaudeCodeAgentTemplate"], "proxiedagenttemplates", prompt="hello", replicas=1
            )
            line = await deliver(kube, "job-run", "--claim", "--provider", str(settings))
            claim = kube.request("GET", claims.resources().claims.path(ns, "job-run"))
            bound = claims.bound_sandbox(claim)
            assert bound is not None
            assert line.startswith(f"sandbox/{bound} (claim job-run): proxy token delivered (token id ")
            await assert_delivered(kube, ns, home, proxy, line, bound)
            kube.request("DELETE", instance)
            await asyncio.to_thread(sandboxes_gone, kube, ns)


async def test_a_missing_claim_and_a_pod_that_never_runs_exit_3_with_one_line(
    kube_env: KubeEnv, tmp_path: Path, proxy: str
) -> None:
    """Nothing to deliver to: one line, exit 3, and no token was issued."""
    async with kubelet.manual_namespace(kube_env) as (_, ns, _control):  # no pod ever runs here
        settings = provider_file(tmp_path, ns, proxy)
        (sandbox,) = catalog.render_pattern(
            "ephemeral",
            patterns.PatternOptions(name="held", namespace=ns, provider=K8sEphemeralProvider.from_file(settings)),
        )
        await asyncio.to_thread(kube_env.apply_objects, [sandbox], namespace=ns)
        common = ("--provider", str(settings), "--kubeconfig", str(kube_env.kubeconfig_path), "--timeout", "3s")
        for args, expected in (
            (
                ("nope", "--claim"),
                f"error: SandboxClaim 'nope' in {ns} was not bound to a Sandbox within 3s (it does not exist): "
                "no token was issued",
            ),
            (("held",), "error: the pod of Sandbox 'held' did not run within 3s: no token was issued"),
        ):
            code, out, err = await asyncio.to_thread(run_sandbox, "deliver-token", *args, *common)
            assert (code, out) == (3, ""), err
            assert err.strip() == expected
