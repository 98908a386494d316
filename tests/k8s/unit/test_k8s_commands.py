"""PodRun / JobRun builders and manifests (pure).

Ports the reference's ``conventions/tests.rs`` and the build cases of ``pod_run/tests.rs``.
"""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.commands.specs import ResourceSpec, SecuritySpec
from ironflow.kube import pod_status
from ironflow.labels import LABEL_ROOT_RUN_ID, LABEL_RUN_ID

NOW = 1_700_000_000
EXPIRES = labels.ANNOTATION_EXPIRES_AT
IRONFLOW_POD = {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: "pod-run"}
IRONFLOW_JOB = {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: "job-run"}


def pod_run() -> PodRun:
    return PodRun("check", "rust:1.94", "cargo test")


def job_run() -> JobRun:
    return JobRun("migrate", "postgres:16", "psql -f m.sql")


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
    (only,) = spec["containers"]
    result: dict[str, Any] = only
    return result


# --- conventions ---


def test_pod_run_carries_ironflow_labels_without_caller_labels() -> None:
    assert pod_run().build_pod(now=NOW)["metadata"]["labels"] == IRONFLOW_POD


def test_pod_run_keeps_caller_labels_next_to_ironflow_labels() -> None:
    run = pod_run().label(LABEL_RUN_ID, "run-1").label(LABEL_ROOT_RUN_ID, "root-1")
    assert run.build_pod(now=NOW)["metadata"]["labels"] == {
        LABEL_RUN_ID: "run-1",
        LABEL_ROOT_RUN_ID: "root-1",
        **IRONFLOW_POD,
    }


def test_pod_run_expires_after_timeout_plus_default_margin() -> None:
    """Default timeout 300 s + margin 60 s."""
    assert pod_run().build_pod(now=NOW)["metadata"]["annotations"] == {EXPIRES: str(NOW + 360)}
    assert pod_run().timeout(30).build_pod(now=NOW)["metadata"]["annotations"][EXPIRES] == str(NOW + 90)


def test_pod_run_expiry_margin_moves_the_annotation() -> None:
    pod = pod_run().timeout(100).expiry_margin(5).build_pod(now=NOW)
    assert pod["metadata"]["annotations"][EXPIRES] == str(NOW + 105)


@pytest.mark.parametrize("key", [labels.LABEL_COMPONENT, labels.LABEL_MANAGED_BY])
def test_pod_run_label_refuses_reserved_keys(key: str) -> None:
    """pod_run_label_refuses_component / pod_run_label_refuses_managed_by."""
    with pytest.raises(errors.ConfigError, match=f"pod label '{key}' is reserved"):
        pod_run().label(key, "x")


def test_pod_run_labels_refuses_a_reserved_key_in_the_map() -> None:
    with pytest.raises(errors.ConfigError, match="is reserved: ironflow sets it on every object it creates"):
        pod_run().labels({"team": "a", labels.LABEL_COMPONENT: "claude-runner"})


def test_pod_run_labels_replaces_previous_labels() -> None:
    run = pod_run().label("a", "1").labels({"b": "2"})
    assert run.build_pod(now=NOW)["metadata"]["labels"] == {"b": "2", **IRONFLOW_POD}


def test_pod_run_label_refuses_an_invalid_value_and_names_the_fix() -> None:
    with pytest.raises(errors.ConfigError, match="sanitize_label_value"):
        pod_run().label(LABEL_RUN_ID, "has space")


def test_job_run_carries_ironflow_labels_on_job_and_pod_template() -> None:
    job = job_run().build_job(now=NOW)
    assert job["metadata"]["labels"] == IRONFLOW_JOB
    assert job["spec"]["template"]["metadata"]["labels"] == IRONFLOW_JOB


def test_job_run_expiry_is_on_the_job_only() -> None:
    job = job_run().build_job(now=NOW)
    assert job["metadata"]["annotations"] == {EXPIRES: str(NOW + 660)}
    assert "annotations" not in job["spec"]["template"]["metadata"]


def test_job_run_caller_labels_reach_job_and_pods() -> None:
    job = job_run().label(LABEL_RUN_ID, "r").build_job(now=NOW)
    assert job["metadata"]["labels"][LABEL_RUN_ID] == "r"
    assert job["spec"]["template"]["metadata"]["labels"][LABEL_RUN_ID] == "r"


def test_job_run_label_refuses_managed_by() -> None:
    with pytest.raises(errors.ConfigError, match=r"pod label 'app\.kubernetes\.io/managed-by' is reserved"):
        job_run().label(labels.LABEL_MANAGED_BY, "me")


def test_job_run_labels_refuses_a_reserved_key_in_the_map() -> None:
    with pytest.raises(errors.ConfigError, match=r"pod label 'app\.kubernetes\.io/component' is reserved"):
        job_run().labels({labels.LABEL_COMPONENT: "x"})


# --- PodRun build ---


def test_build_pod_sets_command_image_and_restart_policy() -> None:
    pod = pod_run().build_pod(now=NOW)
    assert pod["apiVersion"] == "v1"
    assert pod["kind"] == "Pod"
    assert pod["metadata"]["name"] == "check"
    assert pod["metadata"]["namespace"] == "default"
    assert pod["spec"]["restartPolicy"] == "Never"
    c = container(pod)
    assert c == {"name": "check", "image": "rust:1.94", "command": ["/bin/sh", "-c", "cargo test"]}
    assert "securityContext" not in pod["spec"]


def test_build_pod_applies_node_selector() -> None:
    pod = pod_run().node_selector("pool", "ci").node_selector("arch", "amd64").build_pod(now=NOW)
    assert pod["spec"]["nodeSelector"] == {"pool": "ci", "arch": "amd64"}
    assert "nodeSelector" not in pod_run().build_pod(now=NOW)["spec"]


def test_build_pod_applies_image_pull_secret() -> None:
    pod = pod_run().image_pull_secret("regcred").build_pod(now=NOW)
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_build_pod_applies_security_context() -> None:
    pod = (
        pod_run()
        .security(SecuritySpec(run_as_user=1000, run_as_group=1000, fs_group=2000))
        .allow_privilege_escalation(False)
        .automount_service_account_token(False)
        .build_pod(now=NOW)
    )
    assert container(pod)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
    }
    assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "fsGroup": 2000}
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_build_pod_privilege_escalation_alone_sets_only_that_field() -> None:
    pod = pod_run().allow_privilege_escalation(False).build_pod(now=NOW)
    assert container(pod)["securityContext"] == {"allowPrivilegeEscalation": False}
    assert "securityContext" not in pod["spec"]


def test_security_spec_refuses_root() -> None:
    with pytest.raises(errors.ConfigError, match="run_as_user must be greater than 0"):
        SecuritySpec(run_as_user=0)


def test_build_pod_mounts_pvc_and_working_dir() -> None:
    """Claims are named workspace, workspace-1, ... in call order."""
    pod = (
        pod_run().pvc("src", "/work").pvc("cache", "/cache").pvc("out", "/out").working_dir("/work").build_pod(now=NOW)
    )
    assert pod["spec"]["volumes"] == [
        {"name": "workspace", "persistentVolumeClaim": {"claimName": "src"}},
        {"name": "workspace-1", "persistentVolumeClaim": {"claimName": "cache"}},
        {"name": "workspace-2", "persistentVolumeClaim": {"claimName": "out"}},
    ]
    assert container(pod)["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/work"},
        {"name": "workspace-1", "mountPath": "/cache"},
        {"name": "workspace-2", "mountPath": "/out"},
    ]
    assert container(pod)["workingDir"] == "/work"


def test_pvc_refuses_relative_mount_path_and_empty_claim() -> None:
    with pytest.raises(errors.ConfigError, match="pvc mount_path must be absolute, got 'work'"):
        pod_run().pvc("src", "work")
    with pytest.raises(errors.ConfigError, match="pvc claim name must not be empty"):
        job_run().pvc("", "/work")


def test_build_pod_sets_resource_requests_and_limits() -> None:
    pod = pod_run().resources(ResourceSpec("500m", "2", "256Mi", "1Gi")).build_pod(now=NOW)
    assert container(pod)["resources"] == {
        "requests": {"cpu": "500m", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }


def test_build_pod_omits_empty_resource_maps() -> None:
    only_limit = pod_run().resources(ResourceSpec(memory_limit="1Gi")).build_pod(now=NOW)
    assert container(only_limit)["resources"] == {"limits": {"memory": "1Gi"}}
    empty = pod_run().resources(ResourceSpec()).build_pod(now=NOW)
    assert "resources" not in container(empty)


def test_build_pod_deadline_and_runtime_class() -> None:
    pod = pod_run().active_deadline_seconds(90.7).runtime_class("gvisor").build_pod(now=NOW)
    assert pod["spec"]["activeDeadlineSeconds"] == 90
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    bare = pod_run().build_pod(now=NOW)["spec"]
    assert "activeDeadlineSeconds" not in bare
    assert "runtimeClassName" not in bare


@pytest.mark.parametrize("blank", ["", "   "])
def test_pod_run_blank_runtime_class_is_refused(blank: str) -> None:
    with pytest.raises(errors.ConfigError, match="runtime class must not be empty"):
        pod_run().runtime_class(blank)


def test_pod_run_builders_return_copies() -> None:
    """Frozen values: a builder never changes the PodRun it was called on."""
    base = pod_run()
    base.namespace("ci").label("a", "b").timeout(5)
    assert base.settings.namespace == "default"
    assert base.settings.timeout_s == 300
    assert dict(base.settings.labels) == {}


def test_pod_run_defaults() -> None:
    s = pod_run().settings
    assert (s.namespace, s.timeout_s, s.poll_interval_s, s.expiry_margin_s) == ("default", 300, 2, 60)
    j = job_run().settings
    assert (j.namespace, j.backoff_limit, j.timeout_s, j.expiry_margin_s) == ("default", 0, 600, 60)


@pytest.mark.parametrize("name", ["Check", "a_b", "-x", "", "x" * 64])
def test_pod_run_refuses_an_invalid_name(name: str) -> None:
    with pytest.raises(errors.ConfigError, match="is not a valid name"):
        PodRun(name, "img", "true")


@pytest.mark.parametrize("bad", [0, -1])
def test_timeouts_must_be_positive(bad: float) -> None:
    with pytest.raises(errors.ConfigError, match="timeout must be greater than zero"):
        pod_run().timeout(bad)
    with pytest.raises(errors.ConfigError, match="timeout must be greater than zero"):
        job_run().timeout(bad)


def test_kind_is_k8s() -> None:
    assert pod_run().kind == "k8s"
    assert job_run().kind == "k8s"


def test_input_exposes_metadata_no_secret() -> None:
    assert pod_run().namespace("ci").input() == {
        "image": "rust:1.94",
        "namespace": "ci",
        "name": "check",
        "command": "cargo test",
    }
    assert job_run().backoff_limit(2).input()["backoff_limit"] == 2


def test_run_without_api_names_the_fix() -> None:
    import asyncio

    with pytest.raises(errors.ConfigError, match=r"PodRun.run needs an API client"):
        asyncio.run(pod_run().run())


# --- JobRun build ---


def test_build_job_spec() -> None:
    job = (
        job_run()
        .namespace("ci")
        .backoff_limit(3)
        .pvc("data", "/data")
        .allow_privilege_escalation(False)
        .automount_service_account_token(False)
        .active_deadline_seconds(120)
        .build_job(now=NOW)
    )
    assert job["apiVersion"] == "batch/v1"
    assert job["metadata"]["namespace"] == "ci"
    spec = job["spec"]
    assert spec["backoffLimit"] == 3
    assert spec["activeDeadlineSeconds"] == 120
    pod_spec = spec["template"]["spec"]
    assert pod_spec["restartPolicy"] == "Never"
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec["volumes"] == [{"name": "workspace", "persistentVolumeClaim": {"claimName": "data"}}]
    assert container(job) == {
        "name": "migrate",
        "image": "postgres:16",
        "command": ["/bin/sh", "-c", "psql -f m.sql"],
        "volumeMounts": [{"name": "workspace", "mountPath": "/data"}],
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def test_build_job_backoff_limit_defaults_to_zero() -> None:
    assert job_run().build_job(now=NOW)["spec"]["backoffLimit"] == 0


def test_backoff_limit_refuses_negative() -> None:
    with pytest.raises(errors.ConfigError, match="backoff_limit must not be negative"):
        job_run().backoff_limit(-1)


def _pod_with(*statuses: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"phase": "Failed", "containerStatuses": list(statuses)}}


def test_exit_code_is_the_named_containers_terminated_code() -> None:
    pod = _pod_with(
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
        {"name": "check", "state": {"terminated": {"exitCode": 101}}},
    )
    assert pod_status.exit_code(pod, "check") == 101
    assert pod_status.exit_code(pod, "sidecar") == 0


@pytest.mark.parametrize(
    "pod",
    [
        None,
        {},
        {"status": {"phase": "Pending"}},
        _pod_with({"name": "check", "state": {"running": {}}}),
        _pod_with({"name": "other", "state": {"terminated": {"exitCode": 3}}}),
        _pod_with({"name": "check", "state": {"terminated": {"exitCode": "3"}}}),
        _pod_with({"name": "check", "state": {"terminated": {"exitCode": True}}}),
    ],
)
def test_exit_code_is_none_until_the_container_terminated_with_an_integer(pod: dict[str, Any] | None) -> None:
    assert pod_status.exit_code(pod, "check") is None
