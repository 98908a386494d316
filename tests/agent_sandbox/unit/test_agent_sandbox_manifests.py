"""Rendering agent-sandbox values: both API versions validate against the shipped CRD schemas,
and every rule the schema cannot express refuses its failing case with a clear message."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.agent_sandbox import models, rendering, rules, schemas
from ironflow.agent_sandbox.models import ApiVersion

A, B = ApiVersion.V1ALPHA1, ApiVersion.V1BETA1
POD = models.PodTemplate(
    {"containers": [{"name": "agent", "image": "ghcr.io/acme/runner:1", "env": [{"name": "REPO", "value": "x"}]}]}
)


def template(**kw: Any) -> models.SandboxTemplate:
    return models.SandboxTemplate(name=kw.pop("name", "tpl"), pod_template=kw.pop("pod_template", POD), **kw)


def claim(version: ApiVersion = B, **kw: Any) -> models.SandboxClaim:
    if version is A:
        kw.setdefault("template", "tpl")
    else:
        kw.setdefault("warm_pool", "pool")
    return models.SandboxClaim(name=kw.pop("name", "run-1"), api_version=version, **kw)


def refused(value: models.AgentSandboxObject, match: str, **kw: Any) -> None:
    with pytest.raises(errors.ConfigError, match=match):
        rendering.render(value, **kw)


# --- both versions validate ------------------------------------------------------------


@pytest.mark.parametrize("version", [A, B])
def test_every_kind_renders_and_validates_in_both_versions(version: ApiVersion) -> None:
    vct = (models.VolumeClaimTemplate("workspace", storage="1Gi", storage_class_name="standard"),)
    values: list[models.AgentSandboxObject] = [
        models.AgentSandbox(
            "sb",
            POD,
            api_version=version,
            volume_claim_templates=vct,
            shutdown_time="2026-12-31T23:59:59Z",
            shutdown_policy=models.ShutdownPolicy.DELETE,
            service=True,
            **({"replicas": 1} if version is A else {"operating_mode": models.OperatingMode.RUNNING}),
        ),
        template(
            api_version=version,
            volume_claim_templates=vct,
            network_policy_management=models.NetworkPolicyManagement.MANAGED,
            network_policy=models.NetworkPolicyRules(
                ingress=(), egress=({"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"port": 5432}]},)
            ),
            env_vars_injection_policy=models.EnvVarsInjectionPolicy.OVERRIDES,
        ),
        models.SandboxWarmPool(
            "pool", "tpl", api_version=version, replicas=3, update_strategy=models.UpdateStrategy.RECREATE
        ),
        claim(
            version,
            lifecycle=models.Lifecycle("2026-12-31T23:59:59Z", models.ShutdownPolicy.DELETE_FOREGROUND, 300),
            pod_labels={"team.sandbox.users.io/name": "a"},
            # v0.4.x exempts no protected annotation, and takes claim env on cold starts only
            pod_annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"} if version is B else {},
            env=(models.ClaimEnvVar("REPO", "y"),),
            **({"warm_pool": "none"} if version is A else {}),
        ),
    ]
    rendered = rendering.render_all(values)
    assert [o["apiVersion"].rsplit("/", 1)[1] for o in rendered] == [str(version)] * 4
    for obj in rendered:
        assert schemas.schema_problems(obj) == []


def test_v1beta1_claim_names_a_pool_and_v1alpha1_a_template_and_policy() -> None:
    beta = rendering.render(claim(B, lifecycle=models.Lifecycle(ttl_seconds_after_finished=60)))
    assert beta["spec"] == {"warmPoolRef": {"name": "pool"}, "lifecycle": {"ttlSecondsAfterFinished": 60}}
    alpha = rendering.render(claim(A, warm_pool="none"))
    assert alpha["spec"] == {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": "none"}


def test_sandbox_lifecycle_fields_stay_inline_in_spec() -> None:
    obj = rendering.render(models.AgentSandbox("sb", POD, shutdown_time="2026-01-01T00:00:00+02:00"))
    assert obj["spec"]["shutdownTime"] == "2026-01-01T00:00:00+02:00"
    assert "lifecycle" not in obj["spec"]


def test_schema_refuses_an_unknown_pod_field_naming_its_path() -> None:
    bad = models.PodTemplate({"containers": [{"name": "a", "image": "i", "imagePolicy": "x"}]})
    refused(models.AgentSandbox("sb", bad), r"spec\.podTemplate\.spec\.containers\[0\]: Additional properties")


def test_int_or_string_fields_accept_both() -> None:
    pod = models.PodTemplate(
        {
            "containers": [
                {
                    "name": "a",
                    "image": "i",
                    "resources": {"limits": {"cpu": 2, "memory": "1Gi"}},
                    "ports": [{"containerPort": 8888}],
                }
            ]
        }
    )
    rendering.render(models.AgentSandbox("sb", pod))


def test_warm_pool_replicas_below_zero_is_refused_by_our_rule_and_the_schema() -> None:
    refused(models.SandboxWarmPool("p", "tpl", replicas=-1), "replicas must be 0 or more")
    assert schemas.schema_problems(
        {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": "p"},
            "spec": {"replicas": -1, "sandboxTemplateRef": {"name": "t"}},
        }
    )


# --- rules the schema cannot express ---------------------------------------------------


@pytest.mark.parametrize(
    "text", ["2026-12-31", "2026-12-31 23:59:59", "tomorrow", "2026-13-01T00:00:00Z", "2026-12-31T23:59:59"]
)
def test_shutdown_time_must_be_rfc3339(text: str) -> None:
    rfc = "not an RFC 3339 date-time; write it like 2026-12-31T23:59:59Z"
    refused(models.AgentSandbox("sb", POD, shutdown_time=text), rfc)
    refused(claim(lifecycle=models.Lifecycle(shutdown_time=text)), "claim lifecycle.shutdownTime")


def test_rfc3339_formats_aware_datetimes_and_refuses_naive_ones() -> None:
    assert rendering.rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    with pytest.raises(errors.ConfigError, match="needs a timezone"):
        rendering.rfc3339(datetime(2026, 1, 2))


@given(st.datetimes(timezones=st.just(UTC)))
def test_rfc3339_output_is_always_accepted(moment: datetime) -> None:
    assert rules.is_rfc3339(rendering.rfc3339(moment))


def test_pvc_name_is_vct_dash_sandbox() -> None:
    assert rules.pvc_name("workspace", "claude-dev-sandbox") == "workspace-claude-dev-sandbox"


def test_vct_name_must_be_a_dns_label() -> None:
    refused(
        models.AgentSandbox("sb", POD, volume_claim_templates=(models.VolumeClaimTemplate("Work_Space"),)),
        "not a valid DNS label",
    )
    long_vct = (models.VolumeClaimTemplate("w" * 64),)
    refused(models.AgentSandbox("sb", POD, volume_claim_templates=long_vct), "at most 63")


def test_pvc_name_longer_than_253_is_refused() -> None:
    long_name = ".".join(["a" * 60] * 4)  # 243 characters: a valid Sandbox name
    vct = (models.VolumeClaimTemplate("workspace-data"),)
    refused(models.AgentSandbox(long_name, POD, volume_claim_templates=vct), r"PVC name .* exceeds 253")


def test_pvc_name_of_a_warm_pool_member_counts_the_random_suffix() -> None:
    pool = "p" * 240
    vct = (models.VolumeClaimTemplate("workspace"),)
    refused(claim(warm_pool=pool), r"exceeds 253", template=template(volume_claim_templates=vct))


def test_duplicate_vct_names_are_refused() -> None:
    vct = (models.VolumeClaimTemplate("w"), models.VolumeClaimTemplate("w"))
    refused(models.AgentSandbox("sb", POD, volume_claim_templates=vct), "two volume claim templates named 'w'")


def test_service_needs_a_dns_label_sandbox_name() -> None:
    refused(models.AgentSandbox("a.b", POD, service=True), "its Service takes the name")
    rendering.render(models.AgentSandbox("a.b", POD))


def test_claim_env_is_refused_when_the_template_disallows_it() -> None:
    c = claim(env=(models.ClaimEnvVar("TASK", "fix"),))
    refused(c, "envVarsInjectionPolicy Disallowed", template=template())


def test_claim_env_may_not_override_a_template_var_under_allowed() -> None:
    t = template(env_vars_injection_policy=models.EnvVarsInjectionPolicy.ALLOWED)
    refused(claim(env=(models.ClaimEnvVar("REPO", "y"),)), "Allowed refuses: use Overrides", template=t)
    rendering.render(claim(env=(models.ClaimEnvVar("TASK", "y"),)), template=t)
    rendering.render(
        claim(env=(models.ClaimEnvVar("REPO", "y"),)),
        template=t.replace(env_vars_injection_policy=models.EnvVarsInjectionPolicy.OVERRIDES),
    )


def test_claim_env_under_allowed_refuses_a_container_using_env_from() -> None:
    pod = models.PodTemplate(
        {"containers": [{"name": "a", "image": "i", "envFrom": [{"configMapRef": {"name": "c"}}]}]}
    )
    t = template(pod_template=pod, env_vars_injection_policy=models.EnvVarsInjectionPolicy.ALLOWED)
    refused(claim(env=(models.ClaimEnvVar("X", "1"),)), "uses envFrom", template=t)


def test_claim_env_naming_an_unknown_container_is_refused() -> None:
    t = template(env_vars_injection_policy=models.EnvVarsInjectionPolicy.OVERRIDES)
    refused(
        claim(env=(models.ClaimEnvVar("X", "1", container_name="sidecar"),)), "names container 'sidecar'", template=t
    )


def test_claim_env_warns_about_the_cold_start() -> None:
    (warning,) = rules.claim_warnings(claim(env=(models.ClaimEnvVar("X", "secret-ish"),)))
    assert "cold-starts" in warning
    assert "secret-ish" not in warning
    assert rules.claim_warnings(claim()) == ()


def test_claim_env_repr_hides_values() -> None:
    assert "v4lue" not in repr(models.ClaimEnvVar("X", "v4lue"))


@pytest.mark.parametrize("policy", ["Default", "pool_1", "-x"])
def test_v1alpha1_warm_pool_policy_is_none_default_or_a_pool_name(policy: str) -> None:
    refused(claim(A, warm_pool=policy), "must be 'none', 'default' or the name of a SandboxWarmPool")


@pytest.mark.parametrize("policy", ["none", "default", "my-pool"])
def test_v1alpha1_warm_pool_policies_render(policy: str) -> None:
    assert rendering.render(claim(A, warm_pool=policy))["spec"]["warmpool"] == policy


def test_v1beta1_warm_pool_ref_is_a_pool_not_a_policy_word() -> None:
    refused(claim(B, warm_pool="none"), "v1alpha1 policy word, not a pool")
    refused(claim(B, warm_pool=None), "needs warm_pool")
    refused(claim(B, template="tpl"), "names a pool, not a template")


@pytest.mark.parametrize("version", [A, B])
@pytest.mark.parametrize("name", ["default", "none"])
def test_a_warm_pool_named_after_a_policy_word_is_refused(version: ApiVersion, name: str) -> None:
    """No claim could name it: v1beta1 rules refuse the word in warmPoolRef, v1alpha1 reads it as the policy."""
    with pytest.raises(errors.ConfigError, match=rf"SandboxWarmPool name '{name}' .*no claim can name it"):
        rendering.render(models.SandboxWarmPool(name, "tpl", api_version=version, replicas=1))
    rendering.render(models.SandboxWarmPool(f"{name}-pool", "tpl", api_version=version, replicas=1))


def test_the_seeds_claim_example_renders_as_v1alpha1() -> None:
    """The seed's ``additionalPodMetadata.labels.run-id``: v0.4.x checks only protected domains (issue 16.7)."""
    seed = claim(A, pod_labels={"run-id": "abc123"}, pod_annotations={"example.com/note": "x"})
    assert rendering.render(seed)["spec"]["additionalPodMetadata"] == {
        "labels": {"run-id": "abc123"},
        "annotations": {"example.com/note": "x"},
    }
    refused(claim(B, pod_labels={"run-id": "abc123"}), "needs a domain prefix the controller allows")


@pytest.mark.parametrize("key", ["kubernetes.io/x", "node.k8s.io/x", rules.ALLOWED_POD_ANNOTATION])
def test_v1alpha1_claim_pod_metadata_refuses_protected_domains(key: str) -> None:
    """v0.4.x refuses kubernetes.io, k8s.io, agents.x-k8s.io keys on labels and annotations, no exemption."""
    refused(claim(A, pod_annotations={key: "1"}), "protected domain")
    refused(claim(A, pod_labels={key: "1"}), "protected domain")


@pytest.mark.parametrize("policy", [None, "default", "pool"])
def test_v1alpha1_claim_env_needs_warm_pool_none(policy: str | None) -> None:
    """v0.4.x refuses a claim with env unless its warmpool policy is none (v0.5+ cold-starts it instead)."""
    env = (models.ClaimEnvVar("REPO", "y"),)
    tpl = template(env_vars_injection_policy=models.EnvVarsInjectionPolicy.OVERRIDES)
    refused(claim(A, env=env, warm_pool=policy), "warm pool policy 'none'", template=tpl)
    rendering.render(claim(A, env=env, warm_pool="none"), template=tpl)
    rendering.render(claim(B, env=env), template=tpl)


def test_v1alpha1_claim_pod_label_values_follow_the_kubernetes_syntax() -> None:
    refused(claim(A, pod_labels={"run-id": "has space"}), r"claim pod label: label 'run-id' value 'has space'")


@pytest.mark.parametrize("key", ["agents.x-k8s.io/sandbox-name-hash", "extensions.agents.x-k8s.io/x"])
def test_reserved_agents_labels_are_refused_everywhere(key: str) -> None:
    refused(models.AgentSandbox("sb", POD, labels={key: "v"}), "reserved")
    refused(models.AgentSandbox("sb", models.PodTemplate(POD.spec, labels={key: "v"})), "pod template label")
    refused(template(annotations={key: "v"}), "reserved")
    refused(models.SandboxWarmPool("p", "t", labels={key: "v"}), "reserved")
    refused(claim(pod_labels={key: "v"}), "reserved")


def test_label_keys_and_values_follow_the_kubernetes_syntax_everywhere() -> None:
    """The shared label rules (ironflow.labels), named by where the label sits, before the API refuses it."""
    bad_key = r"^Sandbox label: label key 'bad key' is not valid"
    refused(models.AgentSandbox("sb", POD, labels={"bad key": "v"}), bad_key)
    refused(models.AgentSandbox("sb", POD, labels={"Bad_Domain/x": "v"}), "prefix must be a DNS subdomain")
    refused(models.SandboxWarmPool("p", "t", labels={"team": "has space"}), r"label 'team' value 'has space'")
    pod = models.PodTemplate(POD.spec, labels={"team": "-x"})
    refused(models.AgentSandbox("sb", pod), r"pod template label: label 'team' value '-x' is not valid")
    rendering.render(models.AgentSandbox("sb", POD, labels={"example.com/team": "a.b_c-1", "empty": ""}))


def test_names_use_the_shared_dns_rules() -> None:
    refused(models.AgentSandbox("Upper", POD), "not a valid DNS subdomain")
    refused(models.AgentSandbox("a" * 254, POD), "at most 253 characters")
    rendering.render(models.AgentSandbox("a.b-c", POD))
    refused(claim(A, warm_pool="Not_A_Pool"), "warm pool policy 'Not_A_Pool' must be")


def test_claim_pod_labels_need_an_allowed_domain() -> None:
    refused(claim(pod_labels={"team": "a"}), "needs a domain prefix the controller allows")
    refused(claim(pod_labels={"ironflow.io/run-id": "a"}), "allowed-label-domains")
    rendering.render(claim(pod_labels={"ironflow.io/run-id": "a"}), allowed_label_domains=("ironflow.io",))


def test_claim_pod_annotations_in_protected_domains_are_refused() -> None:
    refused(claim(pod_annotations={"kubernetes.io/x": "1"}), "protected domain")
    refused(claim(pod_annotations={"node.k8s.io/x": "1"}), "protected domain")


def test_fields_of_the_other_api_version_are_refused() -> None:
    refused(
        models.AgentSandbox("sb", POD, api_version=A, operating_mode=models.OperatingMode.SUSPENDED),
        "operating_mode is v1beta1",
    )
    refused(models.AgentSandbox("sb", POD, replicas=0), "replicas is v1alpha1")
    refused(models.AgentSandbox("sb", POD, api_version=A, replicas=2), "replicas must be 0 or 1")
    refused(
        template(api_version=A, volume_claim_templates_policy=models.VolumeClaimTemplatesPolicy.ALLOWED), "v1beta1 only"
    )
    refused(claim(A, volume_claim_templates=(models.VolumeClaimTemplate("w"),)), "need API version v1beta1")
    refused(models.SandboxWarmPool("p", "t", api_version=A), "needs replicas")


def test_sandbox_shutdown_policy_delete_foreground_is_for_claims_only() -> None:
    refused(
        models.AgentSandbox("sb", POD, shutdown_policy=models.ShutdownPolicy.DELETE_FOREGROUND),
        "DeleteForeground is for claims",
    )


def test_unmanaged_network_policy_with_rules_is_refused() -> None:
    rules = models.NetworkPolicyRules()
    refused(
        template(network_policy=rules, network_policy_management=models.NetworkPolicyManagement.UNMANAGED),
        "need network_policy_management Managed",
    )


def test_names_must_be_valid() -> None:
    refused(models.AgentSandbox("My_Sandbox", POD), "not a valid DNS subdomain")
    refused(models.AgentSandbox("", POD), "must not be empty")
    refused(models.AgentSandbox("sb", models.PodTemplate({"containers": []})), "at least one container")


def test_render_all_checks_a_v1beta1_claim_against_the_template_behind_its_pool() -> None:
    values: list[models.AgentSandboxObject] = [
        template(),
        models.SandboxWarmPool("pool", "tpl"),
        claim(env=(models.ClaimEnvVar("X", "1"),)),
    ]
    with pytest.raises(errors.ConfigError, match="template 'tpl' has envVarsInjectionPolicy Disallowed"):
        rendering.render_all(values)
