"""Reap decisions (pure): which pods, Jobs, prompt ConfigMaps and claims a pass deletes.

Ports the reference's ``k8s/reaper.rs`` unit cases.
"""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import labels
from ironflow.k8s.reaper import ReapReason, ReapReport, claim_expired, configmap_expired, job_reap_reason, reap_reason

NOW = 1_700_000_000


def pod(
    phase: str | None = "Running",
    *,
    expires: str | None = None,
    reason: str | None = None,
    deleting: bool = False,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "labels": {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE}}
    if expires is not None:
        meta["annotations"] = {labels.ANNOTATION_EXPIRES_AT: expires}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner is not None:
        meta["ownerReferences"] = [owner]
    obj: dict[str, Any] = {"metadata": meta}
    if phase is not None:
        status: dict[str, Any] = {"phase": phase}
        if reason is not None:
            status["reason"] = reason
        obj["status"] = status
    return obj


PAST = str(NOW - 1)
FUTURE = str(NOW + 3600)


def test_k8s_reap_failed_deadline_exceeded() -> None:
    """A pod the kubelet killed for its deadline is reaped even without an annotation."""
    assert reap_reason(pod("Failed", reason="DeadlineExceeded"), NOW) is ReapReason.DEADLINE_EXCEEDED


def test_k8s_reap_running_past_expiry() -> None:
    assert reap_reason(pod("Running", expires=PAST), NOW) is ReapReason.EXPIRED


def test_k8s_reap_running_future_expiry_is_kept() -> None:
    assert reap_reason(pod("Running", expires=FUTURE), NOW) is None


def test_k8s_reap_expiry_equal_to_now_is_kept() -> None:
    """The expiry comparison is strict: an object expiring this second is kept."""
    assert reap_reason(pod("Running", expires=str(NOW)), NOW) is None


def test_k8s_reap_running_without_annotation_is_kept() -> None:
    assert reap_reason(pod("Running"), NOW) is None


@pytest.mark.parametrize("garbage", ["soon", "", "-5", "1.5", "0x10", "+5", "²", "١٢٣"])
def test_k8s_reap_garbage_annotation_is_kept(garbage: str) -> None:
    assert reap_reason(pod("Running", expires=garbage), NOW) is None


def test_k8s_reap_succeeded_past_expiry() -> None:
    assert reap_reason(pod("Succeeded", expires=PAST), NOW) is ReapReason.EXPIRED


def test_k8s_reap_pending_past_expiry() -> None:
    assert reap_reason(pod("Pending", expires=PAST), NOW) is ReapReason.EXPIRED


def test_k8s_reap_failed_other_reason_future_expiry_is_kept() -> None:
    assert reap_reason(pod("Failed", reason="Evicted", expires=FUTURE), NOW) is None


def test_k8s_reap_unknown_phase_past_expiry() -> None:
    """A pod on a lost node reports Unknown forever: its expiry still reaps it."""
    assert reap_reason(pod("Unknown", expires=PAST), NOW) is ReapReason.EXPIRED
    assert reap_reason(pod(None, expires=PAST), NOW) is ReapReason.EXPIRED


def test_k8s_reap_unknown_phase_future_expiry_is_kept() -> None:
    assert reap_reason(pod("Unknown", expires=FUTURE), NOW) is None


def test_k8s_reap_pod_already_terminating_is_left_alone() -> None:
    assert reap_reason(pod("Running", expires=PAST, deleting=True), NOW) is None
    assert reap_reason(pod("Failed", reason="DeadlineExceeded", deleting=True), NOW) is None


def test_k8s_reap_pod_of_a_job_is_left_to_its_job() -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    assert reap_reason(pod("Running", expires=PAST, owner=owner), NOW) is None
    assert reap_reason(pod("Failed", reason="DeadlineExceeded", owner=owner), NOW) is None


def test_k8s_reap_pod_with_non_controller_job_owner_is_reaped() -> None:
    """Only a controlling Job takes the pod over; a mere owner reference does not."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": False}
    assert reap_reason(pod("Running", expires=PAST, owner=owner), NOW) is ReapReason.EXPIRED


def job(conditions: list[dict[str, str]], expires: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "j"}
    if expires is not None:
        meta["annotations"] = {labels.ANNOTATION_EXPIRES_AT: expires}
    return {"metadata": meta, "status": {"conditions": conditions}}


def test_k8s_reap_job_reasons() -> None:
    """Deadline-failed Jobs go at once; others wait for expiry; BackoffLimitExceeded alone is kept."""
    deadline = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}
    backoff = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    assert job_reap_reason(job([deadline], FUTURE), NOW) is ReapReason.DEADLINE_EXCEEDED
    assert job_reap_reason(job([deadline], None), NOW) is ReapReason.DEADLINE_EXCEEDED
    assert job_reap_reason(job([{**deadline, "status": "False"}], FUTURE), NOW) is None
    assert job_reap_reason(job([backoff], FUTURE), NOW) is None
    assert job_reap_reason(job([backoff], PAST), NOW) is ReapReason.EXPIRED
    assert job_reap_reason(job([], PAST), NOW) is ReapReason.EXPIRED
    assert job_reap_reason(job([], None), NOW) is None
    assert job_reap_reason({"metadata": {"name": "bare"}}, NOW) is None


def test_k8s_configmap_expired_true_and_false() -> None:
    def cm(expires: str | None) -> dict[str, Any]:
        ann = {labels.ANNOTATION_EXPIRES_AT: expires} if expires is not None else {}
        return {"metadata": {"name": "c", "annotations": ann}}

    assert configmap_expired(cm(PAST), NOW)
    assert not configmap_expired(cm(FUTURE), NOW)
    assert not configmap_expired(cm(str(NOW)), NOW)
    assert not configmap_expired(cm(None), NOW)
    assert not configmap_expired(cm("tomorrow"), NOW)


def test_k8s_claim_expired_skips_claims_being_deleted() -> None:
    claim = {"metadata": {"name": "c", "annotations": {labels.ANNOTATION_EXPIRES_AT: PAST}}}
    assert claim_expired(claim, NOW)
    deleting = {"metadata": {**claim["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert not claim_expired(deleting, NOW)


def test_k8s_reap_report_total_and_dict() -> None:
    report = ReapReport(pods_deleted=2, jobs_deleted=1, configmaps_deleted=3, pvcs_deleted=1, pods=("a", "b"))
    assert report.total == 7
    assert report.to_dict()["pods"] == ["a", "b"]
    assert report.to_dict()["pvcs_deleted"] == 1


# --- properties ---------------------------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

phases = st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed", "Unknown"])
reasons = st.sampled_from([None, "DeadlineExceeded", "Evicted", "OOMKilled"])
expiries = st.one_of(st.none(), st.integers(0, 2 * NOW).map(str), st.text(max_size=12))


@given(phase=phases, reason=reasons, expires=expiries)
def test_terminating_pods_and_job_pods_are_never_chosen(
    phase: str | None, reason: str | None, expires: str | None
) -> None:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}
    assert reap_reason(pod(phase, expires=expires, reason=reason, deleting=True), NOW) is None
    assert reap_reason(pod(phase, expires=expires, reason=reason, owner=owner), NOW) is None


@given(phase=phases, expires=expiries)
def test_without_a_deadline_kill_only_a_past_parseable_expiry_reaps(phase: str | None, expires: str | None) -> None:
    expected = expires is not None and expires.isascii() and expires.isdigit() and int(expires) < NOW
    got = reap_reason(pod(phase, expires=expires), NOW)
    assert (got is ReapReason.EXPIRED) == expected
    assert got in (None, ReapReason.EXPIRED)
