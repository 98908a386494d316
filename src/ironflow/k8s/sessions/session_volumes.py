"""A cluster session's HOME on a PersistentVolumeClaim, and its snapshots as VolumeSnapshots (pure).

By default a session pod's HOME is an emptyDir, and a snapshot of it is a tar archive read
through its runtime (:mod:`ironflow.k8s.sessions.archives`). With a
:class:`~ironflow.k8s.settings.SessionVolume`
(``session_volume`` in the provider file), HOME is a claim of the volume's StorageClass made for
the session (``<session id>-home``, owned by its pod, so it goes with it). With a
VolumeSnapshotClass too, a snapshot is a ``snapshot.storage.k8s.io/v1`` VolumeSnapshot of that
claim, taken by the cluster's CSI driver, and a session opened from it (a fork among them) gets a
new claim with the snapshot as its ``dataSource``: the workspace never passes through this
machine, and no copy of it is read here. Everything here renders or reads objects; the I/O is
:mod:`ironflow.k8s.sessions.volume_snapshots`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import labels
from ironflow.k8s import hardening
from ironflow.k8s.settings import SessionVolume
from ironflow.kube import quantities
from ironflow.kube.resources import Resource, custom_resource

__all__ = [
    "SNAPSHOT_API_GROUP",
    "VOLUME_SNAPSHOTS",
    "SnapshotState",
    "claim_name",
    "home_claim",
    "owner_patch",
    "snapshot_state",
    "volume_snapshot",
    "with_home_claim",
]

SNAPSHOT_API_GROUP: Final = "snapshot.storage.k8s.io"
VOLUME_SNAPSHOTS: Final[Resource] = custom_resource(SNAPSHOT_API_GROUP, "v1", "volumesnapshots", kind="VolumeSnapshot")
_CLAIM_SUFFIX: Final = "-home"


def claim_name(session_id: str) -> str:
    """The claim holding a session's HOME."""
    return session_id + _CLAIM_SUFFIX


def home_claim(
    session_id: str,
    *,
    namespace: str,
    volume: SessionVolume,
    expires_at: int,
    source: str | None = None,
) -> dict[str, Any]:
    """The session's HOME claim (RWO, the volume's class and size); ``source``: the VolumeSnapshot
    it starts from. Its expiry is the session's: the orphan reaper deletes a claim left without its pod."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": volume.storage_class,
        "resources": {"requests": {"storage": volume.size}},
    }
    if source is not None:
        spec["dataSource"] = {"apiGroup": SNAPSHOT_API_GROUP, "kind": "VolumeSnapshot", "name": source}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(session_id),
            "namespace": namespace,
            "labels": {
                labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
                labels.LABEL_COMPONENT: labels.COMPONENT_SESSION_HOME,
                labels.LABEL_SESSION_ID: session_id,
            },
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(expires_at)},
        },
        "spec": spec,
    }


def with_home_claim(pod: Mapping[str, Any], claim: str) -> dict[str, Any]:
    """``pod`` with its HOME volume on ``claim`` instead of an emptyDir, its group given to the claim
    only where the claim's root lacks it.

    Raises:
        ValueError: the pod has no HOME volume (it was not hardened).
    """
    spec = dict(pod["spec"])
    volumes = [dict(v) for v in spec.get("volumes") or ()]
    home = next((v for v in volumes if v.get("name") == hardening.HOME_VOLUME), None)
    if home is None:
        raise ValueError("the session pod has no HOME volume")
    home.pop("emptyDir", None)
    home["persistentVolumeClaim"] = {"claimName": claim}
    spec["volumes"] = volumes
    # A claim restored from a snapshot already has the pod's group: kubelet's walk would add group
    # bits to every file it holds, so the restored modes would not be the snapshot's.
    spec["securityContext"] = {**(spec.get("securityContext") or {}), "fsGroupChangePolicy": "OnRootMismatch"}
    return {**pod, "spec": spec}


def owner_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch making ``pod`` (as created) the owner of a claim: it goes with the pod."""
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return {"metadata": {"ownerReferences": [owner]}}


def volume_snapshot(
    name: str, *, namespace: str, claim: str, snapshot_class: str, snapshot_labels: Mapping[str, str]
) -> dict[str, Any]:
    """A VolumeSnapshot of ``claim``. It has no owner: it outlives the session, until removed."""
    return {
        "apiVersion": VOLUME_SNAPSHOTS.api_version,
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**snapshot_labels, labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE},
        },
        "spec": {"volumeSnapshotClassName": snapshot_class, "source": {"persistentVolumeClaimName": claim}},
    }


@dataclass(frozen=True)
class SnapshotState:
    """What a VolumeSnapshot's status says: ready to restore, failed (the driver's words), its size."""

    ready: bool
    error: str | None
    size_bytes: int


def snapshot_state(snapshot: Mapping[str, Any]) -> SnapshotState:
    """Read a VolumeSnapshot's status (an unreadable size counts 0).

    >>> snapshot_state({"status": {"readyToUse": True, "restoreSize": "1Mi"}})
    SnapshotState(ready=True, error=None, size_bytes=1048576)
    """
    status = snapshot.get("status") or {}
    error = (status.get("error") or {}).get("message")
    try:
        size = int(quantities.quantity_value(str(status.get("restoreSize") or "0")))
    except ValueError:
        size = 0
    return SnapshotState(status.get("readyToUse") is True, None if error is None else str(error), size)
