"""The seed's patterns: the right objects, valid against the CRDs, each pod the provider's hardened pod."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.agent_sandbox import catalog, patterns, schemas
from ironflow.agent_sandbox.models import ApiVersion
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig

OPTS = patterns.PatternOptions(egress=(("10.10.10.100/32", 5432), ("0.0.0.0/0", None)))
AGENT_SANDBOX_KINDS = {"Sandbox", "SandboxTemplate", "SandboxClaim", "SandboxWarmPool"}


def pod_specs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod spec inside Sandboxes and SandboxTemplates (KRO resources included)."""
    out = []
    for obj in objects:
        if obj.get("kind") == "ResourceGraphDefinition":
            out += pod_specs([r["template"] for r in obj["spec"]["resources"]])
        elif obj.get("kind") in ("Sandbox", "SandboxTemplate"):
            out.append(obj["spec"]["podTemplate"]["spec"])
    return out


def assert_hardened(spec: dict[str, Any]) -> None:
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["runAsNonRoot"] is True
    for container in spec["containers"]:
        ctx = container["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
        assert ctx["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize("version", list(ApiVersion))
@pytest.mark.parametrize("pattern", list(catalog.PATTERNS))
def test_every_pattern_renders_valid_objects_with_hardened_pods(pattern: str, version: ApiVersion) -> None:
    objects = catalog.render_pattern(pattern, patterns.PatternOptions(api_version=version, egress=OPTS.egress))
    assert objects
    specs = pod_specs(objects)
    assert specs, "every pattern holds at least one pod"
    for spec in specs:
        assert_hardened(spec)
    for obj in objects:
        if obj["kind"] in AGENT_SANDBOX_KINDS:
            assert schemas.schema_problems(obj) == []
            assert obj["apiVersion"].endswith(str(version))


def test_pattern_pod_is_the_ephemeral_providers_pod() -> None:
    """Same code: the Sandbox's pod spec equals the provider's pod plus the workspace volume."""
    provider = (
        K8sEphemeralProvider.sandboxed(patterns.DEFAULT_IMAGE)
        .runtime_class("gvisor")
        .egress_profile("anthropic-only")
        .managed_settings_preset("strict", "managed-strict")
        .default_managed_settings("strict")
        .claude_profile_configmap("team-profile")
    )
    opts = patterns.PatternOptions(provider=provider)
    (sandbox,) = catalog.render_pattern("ephemeral", opts)
    config = AgentConfig(opts.prompt, working_dir=patterns.WORKSPACE_PATH)
    pod = next(o for o in provider.manifests(config, now=0, worker_env={}, pod_name="x") if o["kind"] == "Pod")
    spec = sandbox["spec"]["podTemplate"]["spec"]
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["volumes"][:-1] == pod["spec"]["volumes"]
    assert spec["volumes"][-1] == {"name": "workspace", "emptyDir": {}}
    assert spec["containers"][0]["command"] == pod["spec"]["containers"][0]["command"]
    assert "cp -L" in spec["containers"][0]["command"][2]  # the profile copy
    assert sandbox["spec"]["podTemplate"]["metadata"]["labels"][labels.LABEL_EGRESS_PROFILE] == "anthropic-only"
    assert sandbox["spec"]["shutdownPolicy"] == "Delete"


def test_warm_pool_pattern_pod_idles_without_a_deadline() -> None:
    template, pool, claim = catalog.render_pattern("warm-pool")
    spec = template["spec"]["podTemplate"]["spec"]
    assert spec["containers"][0]["command"] == ["sh", "-c", patterns.IDLE_COMMAND]
    assert "activeDeadlineSeconds" not in spec
    assert pool["spec"] == {"replicas": 2, "sandboxTemplateRef": {"name": "claude-agent"}}
    assert claim["spec"]["warmPoolRef"] == {"name": "claude-agent"}
    assert claim["spec"]["lifecycle"] == {"ttlSecondsAfterFinished": 300, "shutdownPolicy": "Delete"}


def test_standalone_pvc_pattern_creates_pvcs_the_sandbox_does_not_own() -> None:
    pvc1, pvc2, sandbox = catalog.render_pattern("standalone-pvc")
    assert (pvc1["kind"], pvc2["kind"]) == ("PersistentVolumeClaim", "PersistentVolumeClaim")
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in sandbox["spec"]["podTemplate"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {pvc1["metadata"]["name"], pvc2["metadata"]["name"]}
    assert "volumeClaimTemplates" not in sandbox["spec"]
    assert sandbox["spec"]["shutdownPolicy"] == "Retain"


def test_network_variants() -> None:
    (secure,) = catalog.render_pattern("network-secure")
    assert secure["spec"]["networkPolicyManagement"] == "Managed"
    assert "networkPolicy" not in secure["spec"]
    (gapped,) = catalog.render_pattern("network-air-gapped")
    assert gapped["spec"]["networkPolicy"] == {"ingress": [], "egress": []}
    (custom,) = catalog.render_pattern("network-custom-egress", OPTS)
    egress = custom["spec"]["networkPolicy"]["egress"]
    assert egress[0] == {"to": [{"ipBlock": {"cidr": "10.10.10.100/32"}}], "ports": [{"protocol": "TCP", "port": 5432}]}
    assert "ports" not in egress[1]
    assert custom["spec"]["networkPolicy"]["ingress"] == [patterns.router_ingress()]


def test_custom_egress_excepts_the_fixed_deny_set_inside_each_cidr() -> None:
    """``--egress 0.0.0.0/0`` no longer opens the cluster, loopback or the metadata address; a private range a rule
    names stays open, and ``--egress-except`` adds ranges to the rules holding them."""
    opts = patterns.PatternOptions(
        egress=(("0.0.0.0/0", 443), ("10.20.0.0/16", 5432), ("::/0", None)),
        egress_except=("203.0.113.0/24", "8.8.8.0/24"),
    )
    (custom,) = catalog.render_pattern("network-custom-egress", opts)
    public, private, v6 = (rule["to"][0]["ipBlock"] for rule in custom["spec"]["networkPolicy"]["egress"])
    assert {"10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12"} <= set(public["except"])
    assert "8.8.8.0/24" in public["except"]
    assert public["except"].count("203.0.113.0/24") == 1  # already in the fixed set (documentation)
    assert private == {"cidr": "10.20.0.0/16"}
    assert {"fc00::/7", "fe80::/10", "::1/128"} <= set(v6["except"])
    assert "8.8.8.0/24" not in v6["except"]


def test_custom_egress_bad_range_is_a_config_error() -> None:
    with pytest.raises(errors.ConfigError, match="invalid egress range"):
        catalog.render_pattern("network-custom-egress", patterns.PatternOptions(egress=(("999.0.0.0/8", None),)))


def test_custom_egress_without_rules_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="needs at least one --egress"):
        catalog.render_pattern("network-custom-egress")


def test_unknown_pattern_names_the_known_ones() -> None:
    with pytest.raises(errors.ConfigError, match="unknown pattern 'x'; known: ephemeral, standalone-pvc"):
        catalog.render_pattern("x")


def test_a_mistyped_pattern_gets_the_nearest_one() -> None:
    with pytest.raises(errors.ConfigError, match=r"^unknown pattern 'warmpool'; did you mean 'warm-pool'[?]$"):
        catalog.render_pattern("warmpool")
