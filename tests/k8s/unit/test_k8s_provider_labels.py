"""Reserved pod labels: refused on the provider at the call, on a step at invocation.

Counterparts of the reference's ``k8s/ephemeral/label_tests.rs``.
"""

from __future__ import annotations

import pytest

from ironflow import AgentConfig, errors, labels
from ironflow.k8s import K8sEphemeralProvider
from ironflow.testing.k8s_validate import validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


@pytest.mark.parametrize("key", [labels.LABEL_MANAGED_BY, labels.LABEL_COMPONENT])
def test_k8s_reserved_provider_pod_label_panics(key: str) -> None:
    with pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider(IMAGE).pod_label(key, "x")
    assert info.value.message == f"pod label '{key}' is reserved: ironflow sets it on every object it creates"


def test_k8s_reserved_provider_pod_labels_map_panics() -> None:
    with pytest.raises(errors.ConfigError, match=r"pod label 'app\.kubernetes\.io/component' is reserved"):
        K8sEphemeralProvider(IMAGE).pod_labels({"team": "a", labels.LABEL_COMPONENT: "x"})


def test_k8s_reserved_step_pod_label_is_an_invocation_error() -> None:
    cfg = AgentConfig("hi").pod_label(labels.LABEL_MANAGED_BY, "me")
    with pytest.raises(errors.StepConfigError) as info:
        K8sEphemeralProvider(IMAGE).manifests(cfg, now=0)
    assert info.value.message == (
        "pod label 'app.kubernetes.io/managed-by' is reserved: ironflow sets it on every object it creates"
    )


def test_k8s_reserved_labels_leave_other_labels_alone() -> None:
    p = K8sEphemeralProvider(IMAGE).pod_labels({"app.kubernetes.io/name": "agent", "ironflow.io/team": "infra"})
    objs = p.manifests(AgentConfig("hi").pod_label("app.kubernetes.io/part-of", "ci"), now=0)
    validate_manifests(objs)
    got = objs[0]["metadata"]["labels"]
    assert got["app.kubernetes.io/name"] == "agent"
    assert got["ironflow.io/team"] == "infra"
    assert got["app.kubernetes.io/part-of"] == "ci"


def test_prompt_configmap_carries_run_labels_only_when_both_present() -> None:
    big = "x" * 100_001
    p = K8sEphemeralProvider(IMAGE)
    scoped = AgentConfig(big).scoped("run-1", "review").pod_label(labels.LABEL_ROOT_RUN_ID, "root-1")
    cm = p.manifests(scoped, now=10)[0]
    validate_manifests([cm])
    assert cm["metadata"]["labels"] == {
        labels.LABEL_MANAGED_BY: "ironflow",
        labels.LABEL_COMPONENT: "prompt-data",
        labels.LABEL_ROOT_RUN_ID: "root-1",
        labels.LABEL_RUN_ID: "run-1",
        labels.LABEL_STEP: "review",
    }
    assert cm["metadata"]["annotations"] == {labels.ANNOTATION_EXPIRES_AT: str(10 + 360)}
    assert cm["data"] == {"prompt": big}
    only_run = AgentConfig(big).pod_label(labels.LABEL_RUN_ID, "run-1")
    cm2 = p.manifests(only_run, now=10)[0]
    validate_manifests([cm2])
    assert labels.LABEL_RUN_ID not in cm2["metadata"]["labels"]
