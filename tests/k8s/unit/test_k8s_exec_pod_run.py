"""``exec_pod_run``: the pod ``ironflow exec --backend k8s`` runs takes the provider's
placement and never less than the Pod Security ``restricted`` posture (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors, labels
from ironflow.k8s.commands.pod_runs import command_line, exec_pod_run
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.testing.k8s_validate import validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


def _pod(provider: K8sEphemeralProvider, argv: list[str] | None = None, timeout_s: float = 30) -> dict[str, Any]:
    run = exec_pod_run(provider.settings, argv or ["true"], timeout_s=timeout_s, now_ms=0x18F2A3B4C5D, rand32=0xAB)
    return run.build_pod(now=1000)


def test_sandboxed_provider_placement_and_hardening_carry_over() -> None:
    provider = (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .namespace("agents")
        .run_as_user(20000)
        .runtime_class("gvisor")
        .pod_label("team", "infra")
        .node_selector("pool", "agents")
        .working_dir("/work")
        .image_pull_secret("regcred")
    )
    pod = _pod(provider, ["sh", "-c", "id -u"])
    spec, (container,) = pod["spec"], pod["spec"]["containers"]
    assert pod["metadata"]["name"] == "exec-18f2a3b4c5d-000000ab"
    assert pod["metadata"]["namespace"] == "agents"
    assert pod["metadata"]["labels"]["team"] == "infra"
    assert pod["metadata"]["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_POD_RUN
    assert container["image"] == IMAGE
    assert container["command"] == ["/bin/sh", "-c", "sh -c 'id -u'"]
    assert container["workingDir"] == "/work"
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["nodeSelector"] == {"pool": "agents"}
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == 20000
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["activeDeadlineSeconds"] == 30
    validate_manifests([pod])


def test_unsandboxed_provider_still_runs_restricted_as_uid_10001_with_a_writable_root() -> None:
    pod = _pod(K8sEphemeralProvider(IMAGE))
    (container,) = pod["spec"]["containers"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is False
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_writable_root_relaxation_of_the_provider_carries_over() -> None:
    pod = _pod(K8sEphemeralProvider.sandboxed(IMAGE).allow_writable_root())
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False


def test_no_env_secret_env_volume_or_egress_profile_reaches_the_command_pod() -> None:
    provider = (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .env("TEAM", "infra")
        .env_from_secret("GH_TOKEN", "github", "token")
        .pvc_volume("cache", "/cache")
        .service_account("agent-reader")
        .egress_profile("anthropic-only")
    )
    pod = _pod(provider)
    assert "env" not in pod["spec"]["containers"][0]
    assert "volumes" not in pod["spec"]
    assert "serviceAccountName" not in pod["spec"]
    assert labels.LABEL_EGRESS_PROFILE not in pod["metadata"]["labels"]


def test_limits_and_a_fractional_timeout_round_the_deadline_up() -> None:
    from ironflow.k8s.settings import K8sResources

    chosen = K8sResources(cpu_limit="1", memory_limit="1Gi")
    pod = _pod(K8sEphemeralProvider(IMAGE).resources(chosen), timeout_s=0.5)
    assert pod["spec"]["containers"][0]["resources"] == chosen.render()
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["spec"]["activeDeadlineSeconds"] == 1


@pytest.mark.parametrize("timeout_s", [0, -1, float("inf"), float("nan")])
def test_a_timeout_that_is_not_positive_and_finite_is_refused(timeout_s: float) -> None:
    with pytest.raises(errors.ConfigError, match="timeout must be a finite number of seconds > 0"):
        _pod(K8sEphemeralProvider(IMAGE), timeout_s=timeout_s)


def test_an_empty_command_is_refused_with_the_usage() -> None:
    with pytest.raises(errors.ConfigError, match=r"missing command: ironflow exec \[OPTIONS\] -- CMD"):
        command_line([])


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00"), min_size=0, max_size=12), min_size=1))
def test_command_line_gives_the_shell_back_exactly_the_words(argv: list[str]) -> None:
    import shlex

    assert shlex.split(command_line(argv)) == argv
