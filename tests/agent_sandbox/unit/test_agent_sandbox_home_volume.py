"""``home_volume``: each sandbox's HOME on a PVC of its own, and when a session may be paused (pure)."""

from __future__ import annotations

import pytest

from ironflow import errors
from ironflow.agent_sandbox import rendering, step_render
from ironflow.agent_sandbox.claim_pauses import pause_refusal
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider


def _provider() -> AgentSandboxProvider:
    return AgentSandboxProvider(K8sEphemeralProvider.sandboxed("runner:test").namespace("agents"))


def test_the_template_claims_a_pvc_named_as_the_home_emptydir_it_replaces() -> None:
    template, _ = step_render.template_values(_provider().home_volume("2Gi").settings)
    rendered = rendering.render(template)
    (vct,) = rendered["spec"]["volumeClaimTemplates"]
    assert vct["metadata"]["name"] == step_render.HOME_VOLUME == "ironflow-home"
    assert vct["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}
    volumes = {v["name"]: v for v in rendered["spec"]["podTemplate"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[step_render.HOME_VOLUME]  # the controller mounts the PVC in its place
    mounts = rendered["spec"]["podTemplate"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": step_render.HOME_VOLUME, "mountPath": "/home/claude"} in [
        {k: m[k] for k in ("name", "mountPath")} for m in mounts
    ]


def test_without_it_home_stays_the_pods_emptydir() -> None:
    template, _ = step_render.template_values(_provider().settings)
    assert "volumeClaimTemplates" not in rendering.render(template)["spec"]


def test_it_is_read_from_the_provider_file_and_checked() -> None:
    pod = {"image": "runner:test", "sandboxed": True}
    assert AgentSandboxProvider.from_dict({"pod": pod, "home_volume": "1Gi"}).settings.home_volume == "1Gi"
    with pytest.raises(errors.ConfigError, match="home_volume must be a non-negative Kubernetes quantity"):
        _provider().home_volume("lots")
    with pytest.raises(errors.ConfigError, match=r"home_volume needs agent-sandbox 1.0 \(api_version v1beta1\)"):
        _provider().api_version("v1alpha1").home_volume("1Gi")


def test_a_session_may_be_paused_only_when_its_home_survives_the_pod() -> None:
    assert pause_refusal(_provider().home_volume().settings) is None
    refusal = pause_refusal(_provider().settings)
    assert refusal is not None
    assert "set home_volume on the provider" in refusal
    assert "\n" not in refusal
    alpha = pause_refusal(_provider().api_version("v1alpha1").settings)
    assert alpha is not None
    assert "v1beta1" in alpha
