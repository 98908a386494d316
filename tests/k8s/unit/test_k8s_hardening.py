"""harden_pod_spec: the sandbox posture applied to any pod spec, and the docstring examples of the rendering modules."""

from __future__ import annotations

import doctest
from types import ModuleType
from typing import Any

import pytest

from ironflow import errors
from ironflow.claude import command, profile
from ironflow.k8s import hardening, step_manifests
from ironflow.k8s import pod_provider as k8s_provider
from ironflow.k8s.commands import pod_runs
from ironflow.k8s.hardening import SandboxSettings, harden_pod_spec
from ironflow.steps import AgentConfig
from ironflow.testing import k8s_validate


def bare_spec() -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "containers": [{"name": "agent", "image": "img", "env": [{"name": "A", "value": "1"}]}],
        "initContainers": [{"name": "fetch", "image": "curl"}],
    }


def test_harden_pod_spec_applies_every_rule_and_leaves_the_input_alone() -> None:
    spec = bare_spec()
    hardened = harden_pod_spec(spec, SandboxSettings())
    assert spec == bare_spec()
    k8s_validate.validate_manifest({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": hardened})
    assert hardened["securityContext"]["runAsUser"] == 10001
    assert hardened["automountServiceAccountToken"] is False
    for container in (hardened["containers"][0], hardened["initContainers"][0]):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert hardened["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "HOME", "value": "/home/claude"},
        {"name": "TMPDIR", "value": "/tmp"},
    ]
    assert "volumeMounts" not in hardened["initContainers"][0]


def test_harden_pod_spec_leaves_token_mounting_to_a_named_service_account() -> None:
    hardened = harden_pod_spec({**bare_spec(), "serviceAccountName": "reader"}, SandboxSettings())
    assert "automountServiceAccountToken" not in hardened


def test_harden_pod_spec_needs_a_container() -> None:
    with pytest.raises(ValueError, match="at least one container"):
        harden_pod_spec({"containers": []}, SandboxSettings())


def test_harden_pod_spec_mounts_the_conversations_claim_under_its_wire_volume_name() -> None:
    hardened = harden_pod_spec(bare_spec(), SandboxSettings(), conversations_claim="talks")
    assert {"name": "ironflow-sessions", "persistentVolumeClaim": {"claimName": "talks"}} in hardened["volumes"]
    mounts = hardened["containers"][0]["volumeMounts"]
    assert {"name": "ironflow-sessions", "mountPath": "/home/claude/.claude/projects"} in mounts


def test_harden_pod_spec_sessions_claim_is_the_old_name_and_warns() -> None:
    renamed = r"harden_pod_spec\.sessions_claim is renamed conversations_claim"
    with pytest.warns(DeprecationWarning, match=renamed):
        hardened = harden_pod_spec(bare_spec(), SandboxSettings(), sessions_claim="talks")
    assert hardened == harden_pod_spec(bare_spec(), SandboxSettings(), conversations_claim="talks")
    with pytest.warns(DeprecationWarning, match=renamed), pytest.raises(TypeError, match="not both"):
        harden_pod_spec(bare_spec(), SandboxSettings(), conversations_claim="a", sessions_claim="b")


def test_sandbox_settings_refuse_values_that_cannot_work() -> None:
    with pytest.raises(errors.ConfigError, match="run_as_user must be greater than 0"):
        SandboxSettings(run_as_user=0)
    with pytest.raises(errors.ConfigError, match="home_size_limit must be a Kubernetes quantity"):
        SandboxSettings(home_size_limit=" ")
    with pytest.raises(errors.ConfigError, match="deadline_margin must be a finite number"):
        SandboxSettings(deadline_margin_s=float("nan"))


@pytest.mark.parametrize("module", [command, profile, step_manifests, k8s_provider, k8s_validate])
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_every_step_pod_ironflow_renders_is_killed_two_seconds_after_sigterm() -> None:
    """An agent pod (sandboxed or not), an ``exec`` pod and a ``restricted()`` ``PodRun`` and
    ``JobRun`` pod: their PID 1 ignores SIGTERM, so the default 30 s grace would be waited out on
    every delete. A plain ``PodRun`` renders what it is given (the reference's output)."""
    sandboxed = k8s_provider.K8sEphemeralProvider.sandboxed("img").namespace("ns")
    plain = k8s_provider.K8sEphemeralProvider("img").namespace("ns")
    specs = [p.manifests(AgentConfig("hi"))[-1]["spec"] for p in (sandboxed, plain)]
    specs.append(
        pod_runs.exec_pod_run(sandboxed.settings, ["true"], timeout_s=9, now_ms=0, rand32=1).build_pod()["spec"]
    )
    specs.append(pod_runs.PodRun("p", "img", "true").namespace("ns").restricted().build_pod()["spec"])
    job = pod_runs.JobRun("j", "img", "true").namespace("ns").restricted().build_job()
    specs.append(job["spec"]["template"]["spec"])
    assert [s["terminationGracePeriodSeconds"] for s in specs] == [hardening.STEP_TERMINATION_GRACE_S] * 5
    assert hardening.STEP_TERMINATION_GRACE_S == 2
    assert "terminationGracePeriodSeconds" not in pod_runs.PodRun("p", "img", "true").build_pod()["spec"]
