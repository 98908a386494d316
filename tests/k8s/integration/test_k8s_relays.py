"""A relay on the pod backend, end to end: the provider file's ``relays:`` entry names a Kubernetes
Secret; the runner reads it as the step starts and hands it to the real auth proxy as a grant of its
own; the pod (run for real in bubblewrap, ``tests/fakes/pod_exec``) holds only the opaque token and
``curl``s the relay. The upstream, an aiohttp server on loopback, records what reached it: the
credential, injected by the proxy, only for requests inside the scope; the value is in no manifest."""

from __future__ import annotations

import base64
import logging
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.fakes.kubecase import KubeCase, nothing_left
from tests.fakes.proxy_tokens import RecordingIssuer
from tests.fakes.recording_upstream import RecordingUpstream, recording_upstream
from tests.k8s.integration.test_k8s_runtime_workspaces import ADMIN, FAKE_CLAUDE, Kubelet, fake_claude

from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy, tokens
from ironflow.auth_proxy.app import RunningProxy
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret, find_leaks
from ironflow.steps import AgentConfig
from ironflow.testing.k8s_validate import validate_manifest

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed"),
]

HOST = "api.example.test"
VALUE = "relay-K8S-SECRET-value-0123456789"
RUN = "01a0e906-1f85-7000-8000-0000000000rl"
#: The pod's agent: an in-scope GET, two refused requests, then a report of their statuses (in scope).
CURLS = (
    'A="Authorization: Bearer $IRONFLOW_RELAY_API_TOKEN"; R="$IRONFLOW_RELAY_API"; '
    'curl -s -o /dev/null -H "$A" "$R/v1/items/7"; '
    'post=$(curl -s -o /dev/null -w "%{http_code}" -X POST -H "$A" "$R/v1/items"); '
    'other=$(curl -s -o /dev/null -w "%{http_code}" -H "$A" "$R/admin"); '
    'curl -s -o /dev/null -H "$A" "$R/v1/items/report?post=$post&other=$other&env=$(env | grep -c SECRET)"'
)


@dataclass
class Site:
    proxy: RunningProxy
    upstream: RecordingUpstream
    root: Path


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    async with recording_upstream() as upstream:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=upstream.url)
        async with run_auth_proxy(config) as proxy:
            yield Site(proxy, upstream, tmp_path)


async def test_a_relay_from_a_secret_reaches_its_host_in_scope_and_no_manifest_holds_its_value(
    kube: KubeCase, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "example-api"},
        "data": {"token": base64.b64encode(VALUE.encode()).decode()},
    }
    await kube.api.create(k8s.SECRETS, kube.namespace, secret)
    provider = K8sEphemeralProvider.from_dict(
        {
            "image": "ghcr.io/acme/claude-runner:2.1.332-1",
            "sandboxed": True,
            "namespace": kube.namespace,
            "timeout_seconds": 30,
            "auth_proxy": site.proxy.url,
            "claude_path": FAKE_CLAUDE,
            "relays": [
                {
                    "name": "api",
                    "host": HOST,
                    "credential_secret": {"secret": "example-api", "key": "token"},
                    "injection": "bearer",
                    "scope": {"methods": ["GET"], "paths": ["/v1/items"]},
                }
            ],
        }
    ).auth_proxy_admin_key(ADMIN)
    kubelet = Kubelet(kube, site.root / "pods", fake_claude(site.root, CURLS))
    async with site.proxy.admin_client() as admin:
        grants = RecordingIssuer(admin)
        runner = provider.runner(api=kube.api, issuer=grants, worker_env={})
        result = await runner.run(AgentConfig("use the api").scoped(RUN, "call"))
    assert result.text == "Hello from the fake model."
    reached = [(seen.method, seen.path, seen.query) for seen in site.upstream.seen]
    assert reached == [
        ("GET", f"/{HOST}/v1/items/7", ""),
        ("GET", f"/{HOST}/v1/items/report", "post=403&other=403&env=0"),  # refused by scope; no value in env
    ]
    assert all(("Authorization", f"Bearer {VALUE}") in seen.headers for seen in site.upstream.seen)
    step_grant, relay_grant = grants.credentials
    assert step_grant is None
    assert isinstance(relay_grant, tokens.SecretCredential)
    assert (relay_grant.hosts, relay_grant.scope) == ((HOST,), tokens.Scope(("GET",), ("/v1/items",)))
    assert len(grants.revoked) == 2  # the step's token and the relay's
    (pod,) = kubelet.pods
    validate_manifest(pod)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["IRONFLOW_RELAY_API"] == f"{site.proxy.url}/r/{HOST}"
    assert env["IRONFLOW_RELAY_API_TOKEN"].startswith("ifap_")
    assert find_leaks([VALUE], str(pod), str(kubelet.configmaps), caplog.text) == []
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)
