"""v1beta1 ``environment_volume``: one PVC per environment id, mounted through the step claim's own
volume claim template; the template holds an emptyDir in its place and lets claims add one."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.agent_sandbox import models, rules, sandbox_environments, schemas
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.environments import EnvironmentVolume
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig

POD = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:1").namespace("agents")
AT_DATA = POD.environment_volume(EnvironmentVolume("/data", size="3Gi", storage_class="fast"))
AT_WORKSPACE = POD.environment_volume(EnvironmentVolume("/workspace"))
TEMPLATE = {
    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
    "kind": "SandboxTemplate",
    "metadata": {"name": "ironflow-agent", "namespace": "agents", "uid": "t-1"},
}


def _template(provider: K8sEphemeralProvider) -> dict[str, Any]:
    objects = sandbox_steps.template_objects(AgentSandboxProvider(provider).settings)
    assert [o["kind"] for o in objects] == ["SandboxTemplate", "SandboxWarmPool"]  # no shared claim any more
    return objects[0]


@pytest.mark.parametrize("provider", [AT_DATA, AT_WORKSPACE], ids=["data", "workspace"])
def test_the_template_mounts_an_emptydir_in_the_environments_place_and_allows_claim_volumes(
    provider: K8sEphemeralProvider,
) -> None:
    template = _template(provider)
    spec = template["spec"]["podTemplate"]["spec"]
    assert template["spec"]["volumeClaimTemplatesPolicy"] == "Allowed"
    assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]  # a warm member has no environment
    assert {"name": "ironflow-environment", "emptyDir": {}} in spec["volumes"]
    path = provider.settings.environment.mount_path if provider.settings.environment else ""
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == path]
    assert mount["name"] == "ironflow-environment"
    assert schemas.schema_problems(template) == []


def test_a_steps_claim_is_named_after_its_environment_and_carries_its_volume_claim_template() -> None:
    settings = AgentSandboxProvider(AT_DATA).settings
    claim = sandbox_steps.claim_manifest(settings, AgentConfig("hi"), name="ironflow-env-1-2", now=0, environment=True)
    assert claim["metadata"]["name"] == "ironflow-env-1-2"
    storage = {"requests": {"storage": "3Gi"}}
    assert claim["spec"]["volumeClaimTemplates"] == [
        {
            "metadata": {"name": "ironflow-environment"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": storage, "storageClassName": "fast"},
        }
    ]
    assert schemas.schema_problems(claim) == []
    plain = sandbox_steps.claim_manifest(settings, AgentConfig("hi"), name="c", now=0)
    assert "volumeClaimTemplates" not in plain["spec"]  # a session's claim, say: the warm pool serves it


def test_the_pvc_is_the_controllers_name_adoptable_by_that_sandbox_only_and_kept_by_the_template() -> None:
    pvc = sandbox_environments.environment_pvc(
        "ironflow-env-1-2",
        namespace="agents",
        volume=EnvironmentVolume("/data", size="3Gi"),
        template=TEMPLATE,
        pod_labels={labels.LABEL_RUN_ID: "r1", "other": "x"},
        expires_at=1234,
    )
    meta = pvc["metadata"]
    # The controller names a claim template's PVC <template>-<sandbox>; a cold Sandbox takes the claim's name.
    assert meta["name"] == rules.pvc_name("ironflow-environment", "ironflow-env-1-2")
    assert meta["labels"][sandbox_environments.NAME_HASH_LABEL] == sandbox_environments.name_hash("ironflow-env-1-2")
    assert meta["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_ENVIRONMENT  # the reaper's selector
    assert meta["labels"][labels.LABEL_RUN_ID] == "r1"
    assert "other" not in meta["labels"]
    assert meta["annotations"] == {labels.ANNOTATION_EXPIRES_AT: "1234"}
    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": TEMPLATE["apiVersion"], "kind": "SandboxTemplate", "name": "ironflow-agent", "uid": "t-1"
    }  # fmt: skip
    assert "controller" not in owner  # so the Sandbox may adopt it (it takes the controller reference)
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_steps_may_resume_any_environment_id_a_claim_can_be_named() -> None:
    settings = AgentSandboxProvider(AT_DATA).settings
    assert settings.own_environments
    assert settings.environment is None
    sandbox_steps.check_step(settings, AgentConfig("hi").resume_environment("ironflow-env-18c2-0a1b2c3d"))
    with pytest.raises(errors.StepConfigError, match="at most 63"):
        sandbox_steps.check_step(settings, AgentConfig("hi").resume_environment("e" * 64))
    with pytest.raises(errors.StepConfigError, match="starting and ending"):
        sandbox_steps.check_step(settings, AgentConfig("hi").resume_environment("-abc"))
    with pytest.raises(errors.StepConfigError, match=r"none \(no environment_volume\)"):
        sandbox_steps.check_step(AgentSandboxProvider(POD).settings, AgentConfig("hi").resume_environment("x"))


def test_the_in_use_line_names_the_environment_and_what_to_do() -> None:
    line = sandbox_environments.in_use_message("ironflow-env-1-2")
    assert "\n" not in line
    assert line.startswith("environment 'ironflow-env-1-2' is in use by a live sandbox (SandboxClaim ironflow-env-1-2)")


def test_a_warm_pool_beside_own_environments_is_warned_about() -> None:
    (warning,) = sandbox_steps.template_warnings(AgentSandboxProvider(AT_DATA).warm_pool(replicas=2).settings)
    assert "each step claims its own environment" in warning
    assert sandbox_steps.template_warnings(AgentSandboxProvider(AT_DATA).warm_pool(replicas=0).settings) == ()


def test_a_template_without_the_environments_claim_is_refused() -> None:
    pod = models.PodTemplate(spec={"containers": [{"name": "c"}], "volumes": []})
    with pytest.raises(errors.ConfigError, match="mounts no claim 'x'"):
        sandbox_environments.placeholder(pod, "x")
