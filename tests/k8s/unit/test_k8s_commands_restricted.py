"""PodRun/JobRun ``restricted()``: the manifests meet Pod Security ``restricted`` (checked
here field by field; the real admission is in tests/k8s/integration/test_realkube_admission.py),
contradictions are refused, and the reference's builders render what they did before."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors
from ironflow.claude.layout import SANDBOX_UID
from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.k8s.commands.specs import SecuritySpec

NOW = 1_000

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": False,
    "runAsNonRoot": True,
    "runAsUser": SANDBOX_UID,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": SANDBOX_UID,
    "runAsGroup": SANDBOX_UID,
    "fsGroup": SANDBOX_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_run() -> PodRun:
    return PodRun("check", "rust:1.94", "cargo test")


def job_run() -> JobRun:
    return JobRun("migrate", "postgres:16", "psql -f m.sql")


def job_pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def test_restricted_pod_run_defaults_to_the_sandbox_uid_and_drops_everything() -> None:
    pod = pod_run().restricted().build_pod(now=NOW)
    assert pod["spec"]["containers"][0]["securityContext"] == RESTRICTED_CONTAINER
    assert pod["spec"]["securityContext"] == RESTRICTED_POD
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_restricted_job_run_hardens_the_pod_template() -> None:
    spec = job_pod_spec(job_run().restricted().build_job(now=NOW))
    assert spec["containers"][0]["securityContext"] == RESTRICTED_CONTAINER
    assert spec["securityContext"] == RESTRICTED_POD
    assert spec["automountServiceAccountToken"] is False


def test_restricted_takes_another_uid_and_an_optional_read_only_root() -> None:
    pod = pod_run().restricted(2000, read_only_root=True).build_pod(now=NOW)
    ctx = pod["spec"]["containers"][0]["securityContext"]
    assert (ctx["runAsUser"], ctx["readOnlyRootFilesystem"]) == (2000, True)
    assert pod["spec"]["securityContext"]["fsGroup"] == 2000


def test_restricted_keeps_a_security_specs_group_and_fs_group() -> None:
    spec = SecuritySpec(run_as_group=3000, fs_group=4000)
    pod = pod_run().security(spec).restricted().build_pod(now=NOW)
    assert pod["spec"]["securityContext"]["runAsGroup"] == 3000
    assert pod["spec"]["securityContext"]["fsGroup"] == 4000
    assert pod["spec"]["securityContext"]["runAsUser"] == SANDBOX_UID


def test_restricted_refuses_a_second_uid_from_security() -> None:
    run = pod_run().security(SecuritySpec(run_as_user=1000)).restricted(2000)
    with pytest.raises(errors.ConfigError, match=r"restricted\(2000\) and security\(run_as_user=1000\)"):
        run.build_pod(now=NOW)


@pytest.mark.parametrize("uid", [0, -1, True])
def test_restricted_refuses_root_or_a_non_uid(uid: int) -> None:
    with pytest.raises(errors.ConfigError, match="restricted uid must be a positive integer"):
        pod_run().restricted(uid)
    with pytest.raises(errors.ConfigError, match="restricted uid must be a positive integer"):
        job_run().restricted(uid)


@pytest.mark.parametrize("make", [pod_run, job_run])
def test_restricted_refuses_privilege_escalation_in_any_order(make: Any) -> None:
    for run in (
        make().restricted().allow_privilege_escalation(True),
        make().allow_privilege_escalation(True).restricted(),
    ):
        build = run.build_pod if isinstance(run, PodRun) else run.build_job
        with pytest.raises(errors.ConfigError, match=r"drop allow_privilege_escalation\(True\)"):
            build(now=NOW)


@pytest.mark.parametrize("make", [pod_run, job_run])
def test_restricted_refuses_a_service_account_token(make: Any) -> None:
    run = make().restricted().automount_service_account_token(True)
    build = run.build_pod if isinstance(run, PodRun) else run.build_job
    with pytest.raises(errors.ConfigError, match=r"drop automount_service_account_token\(True\)"):
        build(now=NOW)


def test_restricted_accepts_the_same_settings_stated_twice() -> None:
    run = pod_run().restricted().allow_privilege_escalation(False).automount_service_account_token(False)
    assert run.build_pod(now=NOW) == pod_run().restricted().build_pod(now=NOW)


def test_without_restricted_the_reference_output_is_unchanged() -> None:
    """No seccomp, no capabilities, no pod securityContext unless a builder asks."""
    pod = pod_run().build_pod(now=NOW)
    assert "securityContext" not in pod["spec"]
    assert "securityContext" not in pod["spec"]["containers"][0]
    assert "automountServiceAccountToken" not in pod["spec"]
    spec = job_pod_spec(job_run().build_job(now=NOW))
    assert "securityContext" not in spec
    assert "securityContext" not in spec["containers"][0]


def test_restricted_returns_a_copy() -> None:
    run = pod_run()
    hardened = run.restricted()
    assert run.settings.restricted_uid is None
    assert hardened.settings.restricted_uid == SANDBOX_UID
