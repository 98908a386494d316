"""Persistent environment claims (§1.12): a PVC a step writes and a later step resumes (pure).

A provider with :class:`EnvironmentVolume` gives every step a read-write PVC at the
volume's mount path: a new claim ``ironflow-env-{ms hex}-{8 hex}``, or the claim a
previous step returned as ``AgentResult.environment_id`` when the step says
``resume_environment(id)``. Claims outlive their step on purpose; they carry
``ironflow.io/expires-at`` = now + max(ttl, pod lifetime), refreshed on every resume, and
the orphan reaper deletes them once expired. Everything here is a function of its
inputs (clock value and random bits passed in); the runtime (``k8s/step_runs.py``) creates,
checks and patches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from ironflow import errors, labels, results, step_sandbox, steps

__all__ = [
    "DEFAULT_ENVIRONMENT_SIZE",
    "DEFAULT_ENVIRONMENT_TTL",
    "ENVIRONMENT_NAME_PREFIX",
    "EnvironmentClaim",
    "EnvironmentVolume",
    "build_environment_claim",
    "environment_claim_for",
    "environment_expires_at",
    "environment_expiry_patch",
    "environment_id_valid",
    "environment_mount",
    "generate_environment_name",
    "is_live_environment_claim",
    "not_found_message",
    "with_environment",
]

DEFAULT_ENVIRONMENT_SIZE: Final = "10Gi"
DEFAULT_ENVIRONMENT_TTL: Final = timedelta(days=7)
ENVIRONMENT_NAME_PREFIX: Final = "ironflow-env"
#: Labels a step's claim copies from its pod (the run's cleanup and audits select on them).
_COPIED_LABELS: Final = (labels.LABEL_ROOT_RUN_ID, labels.LABEL_RUN_ID, labels.LABEL_STEP)


@dataclass(frozen=True)
class EnvironmentVolume:
    """Where a step's persistent environment is mounted, and the claim's size, class and ttl.

    >>> EnvironmentVolume("/workspace").size, EnvironmentVolume("/workspace").ttl.days
    ('10Gi', 7)
    """

    mount_path: str
    size: str = DEFAULT_ENVIRONMENT_SIZE
    #: None: the cluster's default StorageClass.
    storage_class: str | None = None
    #: How long an unused environment is kept (each resume restarts the clock).
    ttl: timedelta = DEFAULT_ENVIRONMENT_TTL

    def problem(self) -> str | None:
        """Why this volume cannot be used, or None."""
        path = self.mount_path.rstrip("/")
        if not self.mount_path.startswith("/"):
            return f"mount_path must be absolute, got '{self.mount_path}'"
        if not path:
            return "mount_path must not be '/'"
        if not self.size.strip():
            return "size must not be empty (e.g. '10Gi')"
        if self.storage_class is not None and not self.storage_class.strip():
            return "storage_class must not be empty; leave it unset for the cluster default"
        if self.ttl.total_seconds() <= 0:
            return f"ttl must be greater than zero, got {self.ttl}"
        return None

    def validate(self) -> None:
        """Raise :class:`~ironflow.errors.ConfigError` ``invalid environment volume: {reason}``."""
        problem = self.problem()
        if problem is not None:
            raise errors.ConfigError(f"invalid environment volume: {problem}")


@dataclass(frozen=True)
class EnvironmentClaim:
    """The claim a step mounts: a new one it creates, or one it resumes."""

    name: str
    resumed: bool


def generate_environment_name(now_ms: int, rand32: int) -> str:
    """``ironflow-env-{unix ms, lowercase hex}-{32 random bits, 8 hex}``."""
    return f"{ENVIRONMENT_NAME_PREFIX}-{now_ms:x}-{rand32 & 0xFFFFFFFF:08x}"


def environment_id_valid(environment_id: str) -> bool:
    """``[a-z0-9-]{1,253}``: a claim name ironflow could have made (the rule lives in ``agent``)."""
    return steps.environment_id_valid(environment_id)


def environment_claim_for(resume_id: str | None, *, now_ms: int, rand32: int) -> EnvironmentClaim:
    """The step's claim: ``resume_id`` resumed, or a new generated name.

    Raises:
        StepConfigError: ``resume_id`` outside ``[a-z0-9-]{1,253}``.
    """
    if resume_id is None:
        return EnvironmentClaim(generate_environment_name(now_ms, rand32), resumed=False)
    if not environment_id_valid(resume_id):
        raise errors.StepConfigError(steps.invalid_environment_id_message(resume_id))
    return EnvironmentClaim(resume_id, resumed=True)


def environment_mount(volume: EnvironmentVolume, claim_name: str) -> step_sandbox.PvcVolume:
    """The claim as a step PVC: the whole claim (no subPath), read-write, at the mount path."""
    return step_sandbox.PvcVolume(claim_name, volume.mount_path, sub_path=None, read_only=False)


def environment_expires_at(volume: EnvironmentVolume, *, now: int, lifetime_s: int) -> int:
    """now + max(ttl, pod lifetime): a claim never expires under its running pod."""
    return now + max(int(volume.ttl.total_seconds()), lifetime_s)


def build_environment_claim(
    name: str,
    *,
    namespace: str,
    volume: EnvironmentVolume,
    pod_labels: Mapping[str, str],
    expires_at: int,
) -> dict[str, Any]:
    """The new claim: RWO, ``requests.storage``, class only if set, labels, expiry annotation."""
    claim_labels = {k: pod_labels[k] for k in _COPIED_LABELS if k in pod_labels}
    claim_labels[labels.LABEL_MANAGED_BY] = labels.MANAGED_BY_VALUE
    claim_labels[labels.LABEL_COMPONENT] = labels.COMPONENT_ENVIRONMENT
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": volume.size}},
    }
    if volume.storage_class is not None:
        spec["storageClassName"] = volume.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": claim_labels,
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(expires_at)},
        },
        "spec": spec,
    }


def environment_expiry_patch(expires_at: int) -> dict[str, Any]:
    """The merge patch that refreshes a resumed claim's expiry (nothing else changes)."""
    return {"metadata": {"annotations": {labels.ANNOTATION_EXPIRES_AT: str(expires_at)}}}


def is_live_environment_claim(claim: Mapping[str, Any] | None) -> bool:
    """A claim a step may resume: ours (managed-by=ironflow, component=environment), not deleting."""
    if not claim:
        return False
    meta = claim.get("metadata") or {}
    claim_labels = meta.get("labels") or {}
    return (
        meta.get("deletionTimestamp") is None
        and claim_labels.get(labels.LABEL_MANAGED_BY) == labels.MANAGED_BY_VALUE
        and claim_labels.get(labels.LABEL_COMPONENT) == labels.COMPONENT_ENVIRONMENT
    )


def not_found_message(environment_id: str) -> str:
    return f"environment '{environment_id}' not found or expired"


def with_environment(result: results.AgentResult, environment_id: str | None) -> results.AgentResult:
    """The step's result carrying the claim it used (§1.9 step 6); unchanged without one."""
    if environment_id is None:
        return result
    return dataclasses.replace(result, environment_id=environment_id)
