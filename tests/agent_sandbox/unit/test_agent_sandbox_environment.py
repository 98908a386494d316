"""``environment_volume`` with agent-sandbox: on v1beta1 one PVC per environment id, the claim's own
(the template holds an emptyDir in its place); on v1alpha1 (no claim volume claim templates) and in
the patterns, one deterministic claim per template or pattern, rendered before the pod that mounts it."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors
from ironflow.agent_sandbox import catalog, patterns, schemas
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.models import ApiVersion
from ironflow.k8s.environments import EnvironmentVolume
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig

POD = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:1").namespace("agents")
AT_WORKSPACE = POD.environment_volume(EnvironmentVolume("/workspace", size="3Gi"))
AT_DATA = POD.environment_volume(EnvironmentVolume("/data"))


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["podTemplate"]["spec"]
    return spec


def claim_names(spec: dict[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v]


def mounts_at(spec: dict[str, Any], path: str) -> list[str]:
    return [m["name"] for m in spec["containers"][0].get("volumeMounts", []) if m["mountPath"] == path]


def test_v1alpha1_template_objects_are_the_same_on_every_render_and_create_the_claim_they_mount() -> None:
    """Before: a random ``ironflow-env-0-<hex>`` each render, never created (every apply an update)."""
    settings = AgentSandboxProvider(AT_WORKSPACE).api_version("v1alpha1").settings
    first, second = sandbox_steps.template_objects(settings), sandbox_steps.template_objects(settings)
    assert first == second
    assert [o["kind"] for o in first] == ["PersistentVolumeClaim", "SandboxTemplate", "SandboxWarmPool"]
    pvc, template, _ = first
    assert pvc["metadata"]["name"] == "ironflow-agent-env" == settings.environment
    assert pvc["metadata"]["namespace"] == "agents"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "3Gi"
    assert "annotations" not in pvc["metadata"]  # no expiry: the reaper never takes it
    assert claim_names(pod_spec(template)) == ["ironflow-agent-env"]
    assert len(mounts_at(pod_spec(template), "/workspace")) == 1


def test_without_an_environment_volume_no_claim_is_rendered() -> None:
    settings = AgentSandboxProvider(POD).settings
    assert settings.environment is None
    assert [o["kind"] for o in sandbox_steps.template_objects(settings)] == ["SandboxTemplate", "SandboxWarmPool"]


def test_a_v1alpha1_step_runs_in_the_templates_environment() -> None:
    """Before: every step was refused (its render named another random claim than the template's)."""
    settings = AgentSandboxProvider(AT_WORKSPACE).api_version("v1alpha1").settings
    sandbox_steps.check_step(settings, AgentConfig("hi"))
    sandbox_steps.check_step(settings, AgentConfig("hi").resume_environment("ironflow-agent-env"))


def test_a_v1alpha1_step_resuming_another_environment_is_refused_naming_the_templates() -> None:
    settings = AgentSandboxProvider(AT_WORKSPACE).api_version("v1alpha1").settings
    with pytest.raises(errors.StepConfigError, match="template's environment, 'ironflow-agent-env', not 'other'"):
        sandbox_steps.check_step(settings, AgentConfig("hi").resume_environment("other"))
    with pytest.raises(errors.StepConfigError, match=r"none \(no environment_volume\)"):
        sandbox_steps.check_step(AgentSandboxProvider(POD).settings, AgentConfig("hi").resume_environment("x"))


def test_a_pool_of_several_sandboxes_on_one_environment_is_warned_about() -> None:
    settings = AgentSandboxProvider(AT_WORKSPACE).api_version("v1alpha1").warm_pool(replicas=2).settings
    (warning,) = sandbox_steps.template_warnings(settings)
    assert "mounts the claims ironflow-agent-env (ReadWriteOnce)" in warning


@pytest.mark.parametrize("pattern", ["ephemeral", "standalone-pvc", "warm-pool", "network-secure"])
def test_pattern_with_the_environment_at_the_workspace_mounts_it_once_and_renders_its_claim(pattern: str) -> None:
    """Before: ``ephemeral`` mounted an emptyDir and a random claim both at /workspace."""
    objects = catalog.render_pattern(pattern, patterns.PatternOptions(name="agent", provider=AT_WORKSPACE))
    assert objects == catalog.render_pattern(pattern, patterns.PatternOptions(name="agent", provider=AT_WORKSPACE))
    pvcs = [o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert "agent-env" in pvcs
    (holder,) = (o for o in objects if o["kind"] in ("Sandbox", "SandboxTemplate"))
    spec = pod_spec(holder)
    assert "agent-env" in claim_names(spec)
    assert len(mounts_at(spec, "/workspace")) == 1
    assert "volumeClaimTemplates" not in holder["spec"]
    assert objects.index(next(o for o in objects if o["metadata"]["name"] == "agent-env")) < objects.index(holder)


def test_pattern_with_the_environment_elsewhere_keeps_its_own_workspace() -> None:
    (pvc, sandbox) = catalog.render_pattern("ephemeral", patterns.PatternOptions(name="agent", provider=AT_DATA))
    assert pvc["metadata"]["name"] == "agent-env"
    spec = pod_spec(sandbox)
    assert len(mounts_at(spec, "/workspace")) == 1
    assert len(mounts_at(spec, "/data")) == 1
    assert {"name": "workspace", "emptyDir": {}} in spec["volumes"]


@pytest.mark.parametrize("version", list(ApiVersion))
@pytest.mark.parametrize("pattern", ["ephemeral", "standalone-pvc", "warm-pool", "network-secure"])
def test_patterns_with_an_environment_and_a_proxy_validate_against_the_crds(pattern: str, version: ApiVersion) -> None:
    provider = AT_WORKSPACE.auth_proxy("http://auth-proxy.ironflow:8080")
    objects = catalog.render_pattern(pattern, patterns.PatternOptions(provider=provider, api_version=version))
    checked = [o for o in objects if o["kind"] != "PersistentVolumeClaim"]
    assert checked
    for obj in checked:
        assert schemas.schema_problems(obj) == []
