"""A session's HOME on a claim and its snapshots as VolumeSnapshots: the objects rendered and read
back, the settings checked, the provider file's ``session_volume:``, and which record a new session
may start from."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow import errors, labels
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import session_pod, session_volumes, volume_snapshots
from ironflow.k8s.settings import ProviderSettings, SessionVolume

SID = "sbx-0123456789abcdef"
VOLUME = SessionVolume("csi-hostpath", size="2Gi", snapshot_class="csi-snaps")


def test_home_claim_is_the_classes_size_and_starts_from_a_snapshot_when_given() -> None:
    claim = session_volumes.home_claim(SID, namespace="team", volume=VOLUME, expires_at=1600, source="snap-1")
    assert claim["metadata"]["name"] == f"{SID}-home"
    assert claim["metadata"]["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_SESSION_HOME
    assert claim["metadata"]["labels"][labels.LABEL_SESSION_ID] == SID
    assert claim["metadata"]["annotations"] == {labels.ANNOTATION_EXPIRES_AT: "1600"}
    assert claim["spec"]["storageClassName"] == "csi-hostpath"
    assert claim["spec"]["resources"] == {"requests": {"storage": "2Gi"}}
    assert claim["spec"]["dataSource"] == {
        "apiGroup": "snapshot.storage.k8s.io",
        "kind": "VolumeSnapshot",
        "name": "snap-1",
    }
    fresh = session_volumes.home_claim(SID, namespace="team", volume=VOLUME, expires_at=1600)
    assert "dataSource" not in fresh["spec"]


def test_the_pod_mounts_home_from_its_claim_and_keeps_the_rest_of_its_hardening() -> None:
    settings = ProviderSettings(image="runner:1", namespace="team", session_volume=VOLUME)
    plain = session_pod.session_pod(SID, settings, ttl_s=600, now=1000)
    pod = session_pod.session_pod(SID, settings, ttl_s=600, now=1000, home_claim=f"{SID}-home")
    home = next(v for v in pod["spec"]["volumes"] if v["name"] == "ironflow-home")
    assert home == {"name": "ironflow-home", "persistentVolumeClaim": {"claimName": f"{SID}-home"}}
    assert pod["spec"]["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
    # everything else as the emptyDir pod: same containers, same other volumes, same security
    assert pod["spec"]["containers"] == plain["spec"]["containers"]
    others = [v for v in pod["spec"]["volumes"] if v["name"] != "ironflow-home"]
    assert others == [v for v in plain["spec"]["volumes"] if v["name"] != "ironflow-home"]
    context = dict(pod["spec"]["securityContext"])
    context.pop("fsGroupChangePolicy")
    assert context == plain["spec"]["securityContext"]


def test_an_unhardened_pod_is_refused() -> None:
    with pytest.raises(ValueError, match="no HOME volume"):
        session_volumes.with_home_claim({"spec": {"volumes": []}}, "c")


def test_owner_patch_names_the_pod_as_created() -> None:
    pod = {"metadata": {"name": SID, "uid": "u-1"}}
    assert session_volumes.owner_patch(pod) == {
        "metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": SID, "uid": "u-1"}]}
    }


def test_volume_snapshot_of_the_claim_has_no_owner_and_ironflows_labels() -> None:
    snap = session_volumes.volume_snapshot(
        "snap-1", namespace="team", claim=f"{SID}-home", snapshot_class="csi-snaps",
        snapshot_labels={labels.LABEL_SNAPSHOT_ID: "snap-1", labels.LABEL_MANAGED_BY: "someone"},
    )  # fmt: skip
    assert snap["apiVersion"] == "snapshot.storage.k8s.io/v1"
    assert snap["spec"] == {
        "volumeSnapshotClassName": "csi-snaps",
        "source": {"persistentVolumeClaimName": f"{SID}-home"},
    }
    assert snap["metadata"]["labels"][labels.LABEL_MANAGED_BY] == "ironflow"  # ironflow's own label wins
    assert "ownerReferences" not in snap["metadata"]


@pytest.mark.parametrize(
    ("status", "want"),
    [
        ({}, session_volumes.SnapshotState(False, None, 0)),
        ({"readyToUse": False, "restoreSize": "1Gi"}, session_volumes.SnapshotState(False, None, 1 << 30)),
        ({"readyToUse": True, "restoreSize": "1048576"}, session_volumes.SnapshotState(True, None, 1 << 20)),
        ({"error": {"message": "no space"}}, session_volumes.SnapshotState(False, "no space", 0)),
        ({"readyToUse": True, "restoreSize": "lots"}, session_volumes.SnapshotState(True, None, 0)),
    ],
)
def test_snapshot_state_reads_the_status(status: dict[str, object], want: session_volumes.SnapshotState) -> None:
    assert session_volumes.snapshot_state({"status": status}) == want


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        (SessionVolume("Not_A_Class"), "storage_class must be a StorageClass name"),
        (SessionVolume("ok", snapshot_class="bad/x"), "snapshot_class must be a VolumeSnapshotClass"),
        (SessionVolume("ok", size="-1Gi"), "size must be a non-negative Kubernetes quantity"),
    ],
)
def test_a_bad_session_volume_is_refused_where_settings_are_built(volume: SessionVolume, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=f"invalid session volume: {message}"):
        K8sEphemeralProvider.sandboxed("runner:1").session_volume(volume)


def test_the_provider_file_gives_the_session_volume(tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text(
        "image: runner:1\nsandboxed: true\nsession_volume:\n  storage_class: csi-hostpath\n  snapshot_class: snaps\n"
    )
    assert K8sEphemeralProvider.from_file(path).settings.session_volume == SessionVolume(
        "csi-hostpath", snapshot_class="snaps"
    )
    path.write_text("image: runner:1\nsession_volume:\n  size: 1Gi\n")
    with pytest.raises(errors.ConfigError, match="storage_class"):
        K8sEphemeralProvider.from_file(path)
    path.write_text("image: runner:1\nsession_volume:\n  storage_class: a\n  snapshotclass: b\n")
    with pytest.raises(errors.ConfigError, match="snapshotclass"):
        K8sEphemeralProvider.from_file(path)


def test_a_record_is_started_from_as_a_volume_snapshot_only_in_its_namespace() -> None:
    record = {"id": "snap-1", "format": "volumesnapshot", "namespace": "team", "volume_snapshot": "snap-1"}
    assert volume_snapshots.source_of(record, namespace="team") == "snap-1"
    assert volume_snapshots.named(record) == ("team", "snap-1")
    assert volume_snapshots.named({"format": "tar"}) is None
    assert volume_snapshots.source_of({"format": "tar"}, namespace="team") is None
    with pytest.raises(errors.ConfigError, match="a VolumeSnapshot in namespace 'team': open it there"):
        volume_snapshots.source_of(record, namespace="other")
