"""Every pattern's v1beta1 objects pass a server-side dry run on a real kube-apiserver with the
v1.0.3 CRDs (schema, CEL rules, defaulting, PodSecurity ``restricted``), the KRO patterns'
children included (resolved for one instance, without KRO; the kro.run objects themselves need
kro's CRDs, which this tier does not install). ``v1alpha1`` objects cannot be dry-run here:
agent-sandbox 1.0 serves ``v1beta1`` only, which the last test shows; they are checked against
the v0.4.6 schema in the unit tier. Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, Final

import pytest
from tests.fakes import kro_instance
from tests.fakes.server_dry_run import dry_run_set

from ironflow.agent_sandbox import catalog, models, patterns
from ironflow.testing.kubeenv import KubeEnv, KubeEnvError

RESTRICTED: Final = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
GROUPS: Final = (models.CORE_GROUP, models.EXTENSIONS_GROUP)
INSTANCE: Final = {"prompt": "Fix the bug.", "schedule": "0 * * * *", "workspacePVC": "w", "memoryPVC": "m"}


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"dry-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


def objects(pattern: str, ns: str, version: models.ApiVersion = models.ApiVersion.V1BETA1) -> list[dict[str, Any]]:
    # 0.0.0.0/0 and ::/0 carry the fixed deny set as `except`: the API server judges those lists too.
    egress = (("10.20.0.0/16", 443), ("0.0.0.0/0", 443), ("::/0", None)) if pattern == "network-custom-egress" else ()
    opts = patterns.PatternOptions(namespace=ns, name=f"p-{pattern}"[:40], api_version=version, egress=egress)
    docs = kro_instance.expand(catalog.render_pattern(pattern, opts), name="run-1", namespace=ns, spec=INSTANCE)
    return [d for d in docs if not str(d["apiVersion"]).startswith("kro.run/")]


def _group(obj: dict[str, Any]) -> str:
    return str(obj["apiVersion"]).split("/")[0]


@pytest.mark.parametrize("pattern", list(catalog.PATTERNS))
def test_every_v1beta1_pattern_passes_a_server_side_dry_run(kube_env: KubeEnv, ns: str, pattern: str) -> None:
    docs = objects(pattern, ns)
    sandboxes = [d for d in docs if _group(d) in GROUPS]
    assert sandboxes, f"{pattern} has no agent-sandbox object"
    with dry_run_set(kube_env, docs) as answers:
        # ServiceAccounts are created for real (a CronJob's pod names one); no pattern has a Deployment
        assert [(a["kind"], a["metadata"]["name"]) for a in answers] == [
            (d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] != "ServiceAccount"
        ]
        for answer in answers:
            if answer["kind"] in ("Sandbox", "SandboxClaim", "SandboxWarmPool", "SandboxTemplate"):
                assert answer["apiVersion"].endswith("/v1beta1")
            if answer["kind"] == "Sandbox":  # the CRD's default: the server read the v1.0.3 schema
                assert answer["spec"]["operatingMode"] == "Running"
    first = sandboxes[0]
    plural = {"Sandbox": "sandboxes"}.get(first["kind"], first["kind"].lower() + "s")
    with pytest.raises(KubeEnvError, match="HTTP 404"):  # a dry run stores nothing
        kube_env.request("GET", f"/apis/{first['apiVersion']}/namespaces/{ns}/{plural}/{first['metadata']['name']}")


def test_a_dry_run_refuses_what_the_v1_0_3_schema_refuses(kube_env: KubeEnv, ns: str) -> None:
    """The check can fail: a v1alpha1 field (suspend by replicas) and a value outside the enum."""
    (sandbox,) = [d for d in objects("ephemeral", ns) if d["kind"] == "Sandbox"]
    alpha = {**sandbox, "spec": {**sandbox["spec"], "replicas": 0}}
    refused = pytest.raises(KubeEnvError, match=r"spec\.replicas: field not declared in schema")
    with refused, dry_run_set(kube_env, [alpha]):
        pass
    paused = {**sandbox, "spec": {**sandbox["spec"], "operatingMode": "Paused"}}
    refused = pytest.raises(KubeEnvError, match=r'HTTP 422.*spec\.operatingMode: Unsupported value: \\"Paused\\"')
    with refused, dry_run_set(kube_env, [paused]):
        pass


def test_v1alpha1_objects_are_not_served_by_agent_sandbox_1_0(kube_env: KubeEnv, ns: str) -> None:
    """Why v1alpha1 is not dry-run here: 1.0 removed the version (no conversion webhook)."""
    (sandbox,) = [d for d in objects("ephemeral", ns, models.ApiVersion.V1ALPHA1) if d["kind"] == "Sandbox"]
    assert sandbox["apiVersion"] == "agents.x-k8s.io/v1alpha1"
    with pytest.raises(KubeEnvError, match="HTTP 404"), dry_run_set(kube_env, [sandbox]):
        pass
    group = kube_env.request("GET", "/apis/agents.x-k8s.io")
    assert [v["version"] for v in group["versions"]] == ["v1beta1"]
