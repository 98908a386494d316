"""Persistent environment claims (§1.12): the volume, the id, the claim, the mount, the merge.

Counterparts of the reference's environment cases in ``k8s/ephemeral.rs`` and
``provider/pod.rs``. Every rendered claim and pod is validated for Kubernetes 1.30 and 1.37.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import AgentConfig, errors, labels
from ironflow.k8s import K8sEphemeralProvider, step_manifests
from ironflow.k8s.environments import (
    EnvironmentClaim,
    EnvironmentVolume,
    build_environment_claim,
    environment_claim_for,
    environment_expires_at,
    environment_expiry_patch,
    environment_id_valid,
    environment_mount,
    generate_environment_name,
    is_live_environment_claim,
    with_environment,
)
from ironflow.results import AgentResult
from ironflow.secrets import find_leaks
from ironflow.step_sandbox import PvcVolume
from ironflow.testing.k8s_validate import validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
NOW = 1_700_000_000
WEEK = 7 * 24 * 3600


def sandboxed() -> K8sEphemeralProvider:
    return K8sEphemeralProvider.sandboxed(IMAGE)


def render(p: K8sEphemeralProvider, cfg: AgentConfig, **kw: Any) -> list[dict[str, Any]]:
    objs = p.manifests(cfg, now=NOW, pod_name="claude-code-test-00000001", **kw)
    validate_manifests(objs)
    return objs


def claim_object(**meta: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "ironflow-env-1-2",
        "labels": {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: labels.COMPONENT_ENVIRONMENT},
    }
    base.update(meta)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": base}


# --- EnvironmentVolume (provider/pod.rs) --------------------------------------------------


def test_environment_volume_defaults() -> None:
    v = EnvironmentVolume("/workspace")
    assert (v.mount_path, v.size, v.storage_class, v.ttl) == ("/workspace", "10Gi", None, timedelta(days=7))
    v.validate()


@pytest.mark.parametrize("path", ["workspace", "./w", "", "/", "//"])
def test_environment_volume_validate_rejects_relative_and_root_paths(path: str) -> None:
    with pytest.raises(errors.ConfigError, match=r"^invalid environment volume: mount_path"):
        EnvironmentVolume(path).validate()


@pytest.mark.parametrize(
    ("volume", "reason"),
    [
        (EnvironmentVolume("/w", size=""), "size must not be empty"),
        (EnvironmentVolume("/w", size="  "), "size must not be empty"),
        (EnvironmentVolume("/w", storage_class=" "), "storage_class must not be empty"),
        (EnvironmentVolume("/w", ttl=timedelta(0)), "ttl must be greater than zero"),
        (EnvironmentVolume("/w", ttl=timedelta(seconds=-1)), "ttl must be greater than zero"),
    ],
)
def test_environment_volume_validate_rejects_empty_size_class_and_ttl(volume: EnvironmentVolume, reason: str) -> None:
    with pytest.raises(errors.ConfigError, match=f"^invalid environment volume: {reason}"):
        volume.validate()


# --- environment ids ----------------------------------------------------------------------


@pytest.mark.parametrize("env_id", ["a", "ironflow-env-18bcfe56800-0000abcd", "0-0", "a" * 253])
def test_environment_id_valid_accepts_dns_names(env_id: str) -> None:
    assert environment_id_valid(env_id)
    assert AgentConfig("p").resume_environment(env_id).resume_environment_id == env_id


def test_environment_id_empty_panics() -> None:
    assert not environment_id_valid("")
    with pytest.raises(errors.ConfigError, match=r"environment id must match \[a-z0-9-\]\{1,253\}, got ''"):
        AgentConfig("p").resume_environment("")


def test_environment_id_uppercase_panics() -> None:
    assert not environment_id_valid("Ironflow-env")
    with pytest.raises(errors.ConfigError, match="environment id must match"):
        AgentConfig("p").resume_environment("Ironflow-env")


def test_environment_id_too_long_panics() -> None:
    assert not environment_id_valid("a" * 254)
    with pytest.raises(errors.ConfigError, match="environment id must match"):
        AgentConfig("p").resume_environment("a" * 254)


@given(st.text(max_size=300))
def test_environment_id_valid_is_exactly_the_claim_name_charset(text: str) -> None:
    expected = 1 <= len(text) <= 253 and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in text)
    assert environment_id_valid(text) == expected


def test_resume_environment_id_round_trips_through_to_dict() -> None:
    cfg = AgentConfig("p").resume_environment("ironflow-env-1-2")
    assert cfg.to_dict()["resume_environment_id"] == "ironflow-env-1-2"
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg
    assert "resume_environment_id" not in AgentConfig("p").to_dict()
    with pytest.raises(errors.ConfigError, match="environment id must match"):
        AgentConfig.from_dict({"prompt": "p", "resume_environment_id": "BAD"})


# --- provider builder and YAML (k8s/ephemeral.rs) -------------------------------------------


def test_ephemeral_provider_environment_volume_builder() -> None:
    v = EnvironmentVolume("/workspace", size="20Gi", storage_class="fast", ttl=timedelta(days=1))
    p = sandboxed().environment_volume(v)
    assert p.settings.environment == v
    assert sandboxed().settings.environment is None
    # not a relaxation: a plain provider takes it too
    assert K8sEphemeralProvider(IMAGE).environment_volume(v).settings.environment == v


def test_ephemeral_provider_environment_volume_rejects_relative_path() -> None:
    with pytest.raises(errors.ConfigError, match=r"^invalid environment volume: mount_path must be absolute"):
        sandboxed().environment_volume(EnvironmentVolume("workspace"))


def test_environment_volume_loads_from_yaml(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "image: img\nenvironment_volume:\n  mount_path: /workspace\n  size: 5Gi\n"
        "  storage_class: fast\n  ttl_seconds: 3600\n"
    )
    env = K8sEphemeralProvider.from_file(f).settings.environment
    assert env == EnvironmentVolume("/workspace", "5Gi", "fast", timedelta(hours=1))
    minimal = K8sEphemeralProvider.from_dict({"image": "i", "environment_volume": {"mount_path": "/w"}})
    assert minimal.settings.environment == EnvironmentVolume("/w")


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({}, "environment_volume.mount_path: is required"),
        ({"mount_path": "/w", "size": 10}, "environment_volume.size: must be a string"),
        ({"mount_path": "/w", "ttl": 1}, "environment_volume: unknown key 'ttl'; known: mount_path, size"),
        ({"mount_path": "/w", "ttl_seconds": 0}, "invalid environment volume: ttl must be greater than zero"),
        ({"mount_path": "rel"}, "invalid environment volume: mount_path must be absolute"),
    ],
)
def test_environment_volume_yaml_errors_name_the_setting(section: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        K8sEphemeralProvider.from_dict({"image": "i", "environment_volume": section})


# --- pure parts -----------------------------------------------------------------------------


def test_environment_claim_for_new_and_resumed() -> None:
    new = environment_claim_for(None, now_ms=0x18BCFE56800, rand32=0xABCD)
    assert new == EnvironmentClaim("ironflow-env-18bcfe56800-0000abcd", resumed=False)
    assert generate_environment_name(255, 0xFFFFFFFF) == "ironflow-env-ff-ffffffff"
    resumed = environment_claim_for("ironflow-env-1-2", now_ms=1, rand32=2)
    assert resumed == EnvironmentClaim("ironflow-env-1-2", resumed=True)


@pytest.mark.parametrize("bad", ["", "Upper", "under_score", "a" * 254, "dot.ted"])
def test_environment_claim_for_rejects_invalid_id(bad: str) -> None:
    with pytest.raises(errors.StepConfigError, match="environment id must match"):
        environment_claim_for(bad, now_ms=1, rand32=2)


def test_environment_mount_is_read_write_root_of_claim() -> None:
    mount = environment_mount(EnvironmentVolume("/workspace"), "ironflow-env-1-2")
    assert mount == PvcVolume("ironflow-env-1-2", "/workspace", sub_path=None, read_only=False)


def test_build_environment_claim_sets_spec_labels_and_expiry() -> None:
    volume = EnvironmentVolume("/w", size="20Gi", storage_class="fast-ssd")
    pod_labels = {
        labels.LABEL_RUN_ID: "r1",
        labels.LABEL_ROOT_RUN_ID: "root",
        labels.LABEL_STEP: "build",
        labels.LABEL_EGRESS_PROFILE: "open",
        "team": "infra",
    }
    claim = build_environment_claim(
        "ironflow-env-1-2", namespace="agents", volume=volume, pod_labels=pod_labels, expires_at=NOW + WEEK
    )
    validate_manifests([claim])
    assert claim["metadata"] == {
        "name": "ironflow-env-1-2",
        "namespace": "agents",
        "labels": {
            labels.LABEL_ROOT_RUN_ID: "root",
            labels.LABEL_RUN_ID: "r1",
            labels.LABEL_STEP: "build",
            labels.LABEL_MANAGED_BY: "ironflow",
            labels.LABEL_COMPONENT: "environment",
        },
        "annotations": {labels.ANNOTATION_EXPIRES_AT: str(NOW + WEEK)},
    }
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "20Gi"}},
        "storageClassName": "fast-ssd",
    }


def test_build_environment_claim_without_class_uses_cluster_default() -> None:
    claim = build_environment_claim("e", namespace="n", volume=EnvironmentVolume("/w"), pod_labels={}, expires_at=1)
    validate_manifests([claim])
    assert "storageClassName" not in claim["spec"]
    assert claim["metadata"]["labels"] == {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: "environment"}


def test_environment_expiry_is_the_longer_of_ttl_and_pod_lifetime() -> None:
    short = EnvironmentVolume("/w", ttl=timedelta(seconds=10))
    assert environment_expires_at(short, now=NOW, lifetime_s=360) == NOW + 360
    assert environment_expires_at(EnvironmentVolume("/w"), now=NOW, lifetime_s=360) == NOW + WEEK
    assert environment_expiry_patch(5) == {"metadata": {"annotations": {labels.ANNOTATION_EXPIRES_AT: "5"}}}


def test_is_live_environment_claim_rejects_foreign_and_deleting_claims() -> None:
    assert is_live_environment_claim(claim_object())
    assert not is_live_environment_claim(None)
    assert not is_live_environment_claim(claim_object(deletionTimestamp="2026-01-01T00:00:00Z"))
    assert not is_live_environment_claim(claim_object(labels={labels.LABEL_MANAGED_BY: "ironflow"}))
    assert not is_live_environment_claim(
        claim_object(labels={labels.LABEL_MANAGED_BY: "someone", labels.LABEL_COMPONENT: "environment"})
    )
    assert not is_live_environment_claim(claim_object(labels=None))


def test_with_environment_sets_output_environment_id() -> None:
    result = AgentResult("done", 12)
    assert with_environment(result, "ironflow-env-1-2").environment_id == "ironflow-env-1-2"
    assert with_environment(result, "ironflow-env-1-2").value == "done"
    assert with_environment(result, None) is result


# --- invocation-time merge and the pod ----------------------------------------------------------


def test_merged_resume_environment_without_volume_is_an_error() -> None:
    cfg = AgentConfig("p").resume_environment("ironflow-env-1-2")
    with pytest.raises(
        errors.StepConfigError, match=r"^resume_environment needs K8sEphemeralProvider.environment_volume$"
    ):
        step_manifests.merged_pod_inputs(sandboxed().settings, cfg)
    # checked first: before the sandbox's refusal of inline credentials
    with pytest.raises(errors.StepConfigError, match="resume_environment needs"):
        step_manifests.merged_pod_inputs(sandboxed().oauth_credentials("{}").settings, cfg)


def test_merged_resume_environment_with_volume_is_accepted() -> None:
    p = sandboxed().environment_volume(EnvironmentVolume("/workspace"))
    inputs = step_manifests.merged_pod_inputs(p.settings, AgentConfig("p").resume_environment("ironflow-env-1-2"))
    assert inputs.step_pvc_volumes == ()  # the claim is added when the pod is built


def test_pod_spec_mounts_environment_claim_read_write() -> None:
    p = sandboxed().environment_volume(EnvironmentVolume("/workspace"))
    claim, pod = render(p, AgentConfig("p").scoped("run", "step"), environment_id="ironflow-env-1-2")
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"]["name"] == "ironflow-env-1-2"
    assert claim["metadata"]["labels"][labels.LABEL_STEP] == "step"
    assert claim["metadata"]["annotations"][labels.ANNOTATION_EXPIRES_AT] == str(NOW + WEEK)
    spec = pod["spec"]
    assert {"name": "step-pvc-0", "persistentVolumeClaim": {"claimName": "ironflow-env-1-2"}} in spec["volumes"]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == "/workspace")
    assert mount == {"name": "step-pvc-0", "mountPath": "/workspace"}  # read-write, whole claim


def test_pod_spec_mounts_a_resumed_claim_and_creates_none() -> None:
    p = sandboxed().environment_volume(EnvironmentVolume("/workspace"))
    cfg = AgentConfig("p").pvc_volume("data", "/data").resume_environment("ironflow-env-1-2")
    (pod,) = render(p, cfg, environment_id="ignored-when-resuming")
    vols = pod["spec"]["volumes"]
    assert {"name": "step-pvc-1", "persistentVolumeClaim": {"claimName": "ironflow-env-1-2"}} in vols


def test_pod_spec_environment_generated_name_and_creation_order() -> None:
    p = sandboxed().environment_volume(EnvironmentVolume("/workspace"))
    cm, claim, pod = render(p, AgentConfig("x" * 120_000))
    assert [cm["kind"], claim["kind"], pod["kind"]] == ["ConfigMap", "PersistentVolumeClaim", "Pod"]
    assert claim["metadata"]["name"].startswith(f"ironflow-env-{NOW * 1000:x}-")


def test_environment_mount_path_conflicts_are_refused() -> None:
    p = sandboxed().environment_volume(EnvironmentVolume("/home/claude"))
    with pytest.raises(errors.StepConfigError, match="step pvc volume cannot be mounted at reserved path"):
        render(p, AgentConfig("p"))
    p = sandboxed().environment_volume(EnvironmentVolume("/data"))
    with pytest.raises(errors.StepConfigError, match="duplicate volume mount path '/data'"):
        render(p, AgentConfig("p").pvc_volume("other", "/data"))


def test_environment_claim_holds_no_credential() -> None:
    """The proxy token reaches the pod env only; the claim carries names, labels and an expiry."""
    token = "ifap_" + "t" * 40
    p = sandboxed().environment_volume(EnvironmentVolume("/workspace")).auth_proxy("http://proxy:8080")
    claim, pod = render(p, AgentConfig("p").scoped("run", "step"), proxy_token=token)
    assert find_leaks([token], [json.dumps(claim)]) == []
    assert find_leaks([token], [json.dumps(pod)]) != []  # the scan can see it where it is


def test_local_sandbox_reports_resume_environment_as_ignored() -> None:
    """A local step cannot mount a Kubernetes claim: the result says so instead of pretending."""
    from ironflow.local.sandbox.environment import ignored_settings

    ignored = ignored_settings(AgentConfig("p").resume_environment("ironflow-env-1-2"))
    assert ignored == ("resume_environment ironflow-env-1-2 (no persistent environments locally)",)
    assert ignored_settings(AgentConfig("p")) == ()
