"""The real node's CSI storage as values: the driver's sockets and volumes under the node's work
dir, each sidecar pointed at the driver, and objects that let kubelet mount a volume without an
attach step and give it to the pod's fsGroup."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow.testing import _node_config as config
from ironflow.testing import _node_csi as csi

LAYOUT = config.NodeLayout(root=Path("/w"), cgroup="/ironflow-node-7", bin_dir=Path("/b"))
KUBECONFIG = Path("/w/admin.kubeconfig")
#: A unix socket's path must fit sockaddr_un (108 bytes with the NUL) under the real work dir's name.
_WORKDIR_EXAMPLE = Path("/tmp/ironflow-realnode-abcd1234")


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in args)


def test_the_driver_registers_with_kubelet_and_keeps_its_state_under_the_work_dir() -> None:
    flags = _flags(csi.driver_args(LAYOUT))
    kubelet_root = str(LAYOUT.path("kubelet"))
    assert flags == {
        "csi-endpoint": f"{kubelet_root}/plugins/hostpath.csi.ironflow.io/csi.sock",
        "registration-dir": f"{kubelet_root}/plugins_registry",
        "state-dir": "/w/node/csi-hostpath",
        "node-id": config.NODE_NAME,
    }
    real = config.NodeLayout(root=_WORKDIR_EXAMPLE, cgroup="/x", bin_dir=Path("/b"))
    registration = real.path("kubelet") / "plugins_registry" / f"{config.CSI_DRIVER}-reg.sock"
    assert len(str(registration)) < 108
    assert len(str(csi.socket_path(real))) < 108


@pytest.mark.parametrize("name", csi.SIDECARS)
def test_each_sidecar_talks_to_the_driver_alone_without_group_snapshots(name: str) -> None:
    flags = _flags(csi.sidecar_args(name, LAYOUT, kubeconfig=KUBECONFIG))
    assert flags["kubeconfig"] == str(KUBECONFIG)
    assert flags["leader-election"] == "false"  # one replica
    if name == "snapshot-controller":
        assert "csi-address" not in flags  # it talks to the API only
    else:
        assert flags["csi-address"] == str(csi.socket_path(LAYOUT))
    if name != "csi-provisioner":  # their CRDs are not installed: off, not waited for
        assert flags["feature-gates"] == "CSIVolumeGroupSnapshot=false"


def test_an_unknown_sidecar_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown CSI sidecar 'csi-attacher'"):
        csi.sidecar_args("csi-attacher", LAYOUT, kubeconfig=KUBECONFIG)


def test_the_driver_needs_no_attach_and_its_classes_carry_the_names_ironflow_uses() -> None:
    driver, storage_class, snapshot_class = csi.storage_objects()
    assert (driver["kind"], driver["metadata"]["name"]) == ("CSIDriver", "hostpath.csi.ironflow.io")
    assert driver["spec"]["attachRequired"] is False  # else kubelet waits for a VolumeAttachment forever
    assert driver["spec"]["fsGroupPolicy"] == "File"  # a non-root pod's fsGroup owns the volume
    assert (storage_class["kind"], storage_class["metadata"]["name"]) == ("StorageClass", "ironflow-csi-hostpath")
    assert storage_class["provisioner"] == config.CSI_DRIVER
    assert storage_class["reclaimPolicy"] == "Delete"
    assert snapshot_class["apiVersion"] == "snapshot.storage.k8s.io/v1"
    assert (snapshot_class["kind"], snapshot_class["metadata"]["name"]) == (
        "VolumeSnapshotClass",
        "ironflow-csi-hostpath",
    )
    assert (snapshot_class["driver"], snapshot_class["deletionPolicy"]) == (config.CSI_DRIVER, "Delete")


def test_registered_only_once_the_nodes_csinode_lists_the_driver_for_this_node() -> None:
    listed = {"name": config.CSI_DRIVER, "nodeID": config.NODE_NAME}
    assert csi.registered({"spec": {"drivers": [{"name": "other.csi"}, listed]}})
    assert not csi.registered({"spec": {"drivers": None}})
    assert not csi.registered({})
    assert not csi.registered({"spec": {"drivers": [{**listed, "nodeID": "another-node"}]}})
