"""The real node's CSI storage as values (pure): where the driver's sockets and volumes go, the
command lines of the driver and of the sidecars, and the objects that make the driver usable.

The driver is ironflow's own stand-in (``scripts/kube-testenv.d/hostpath-csi``, built by
``scripts/kube-testenv build --csi``), not the upstream csi-driver-host-path: volumes are
directories under the node's work dir, a snapshot or a clone is a full copy, capacity is recorded
and never enforced. It serves kubelet's plugin-registration socket itself, so no
node-driver-registrar runs. Around it run the upstream ``csi-provisioner``, ``csi-snapshotter``
and ``snapshot-controller``.

Every path is under the node's work dir: nothing on the host is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from ironflow.testing import _node_config as config

__all__ = [
    "DRIVER_BINARY",
    "SIDECARS",
    "driver_args",
    "registered",
    "sidecar_args",
    "socket_path",
    "state_dir",
    "storage_objects",
]

DRIVER_BINARY: Final = "hostpath-csi"
#: The upstream controllers, each run once beside the driver (no leader election: one replica).
SIDECARS: Final = ("csi-provisioner", "csi-snapshotter", "snapshot-controller")
#: Generous for a copy on a loaded 2-core machine; the sidecars' defaults are 10 s and 1 min.
_CSI_TIMEOUT: Final = "60s"


def socket_path(layout: config.NodeLayout) -> Path:
    """The driver's CSI socket, where kubelet's plugins live (kubelet learns it at registration)."""
    return layout.path("kubelet") / "plugins" / config.CSI_DRIVER / "csi.sock"


def state_dir(layout: config.NodeLayout) -> Path:
    """Where the driver keeps volumes (``volumes/<id>``) and snapshots (``snapshots/<id>``)."""
    return layout.path("csi-hostpath")


def driver_args(layout: config.NodeLayout) -> list[str]:
    """The driver: its CSI socket, kubelet's registration dir, its state dir, this node's name."""
    return [
        f"--csi-endpoint={socket_path(layout)}",
        f"--registration-dir={layout.path('kubelet') / 'plugins_registry'}",
        f"--state-dir={state_dir(layout)}",
        f"--node-id={config.NODE_NAME}",
    ]


def sidecar_args(name: str, layout: config.NodeLayout, *, kubeconfig: Path) -> list[str]:
    """One of :data:`SIDECARS`' flags: the admin kubeconfig, the driver's socket (not
    snapshot-controller, which talks to the API only), quick retries, group snapshots off (their
    CRDs are not installed, and snapshot-controller waits 30 s for them otherwise)."""
    common = [f"--kubeconfig={kubeconfig}", "--leader-election=false", "--retry-interval-max=5s", "--v=2"]
    no_groups = "--feature-gates=CSIVolumeGroupSnapshot=false"
    if name == "csi-provisioner":
        return [*common, f"--csi-address={socket_path(layout)}", f"--timeout={_CSI_TIMEOUT}"]
    if name == "csi-snapshotter":
        return [*common, f"--csi-address={socket_path(layout)}", f"--timeout={_CSI_TIMEOUT}", no_groups]
    if name == "snapshot-controller":
        return [*common, no_groups]
    raise ValueError(f"unknown CSI sidecar {name!r}: expected one of {', '.join(SIDECARS)}")


def storage_objects() -> list[dict[str, Any]]:
    """The CSIDriver (no attach step, else kubelet waits for a VolumeAttachment forever; fsGroup
    applied by kubelet, so a non-root pod owns its volume), the StorageClass and the
    VolumeSnapshotClass (whose CRDs must be installed first)."""
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSIDriver",
            "metadata": {"name": config.CSI_DRIVER},
            "spec": {
                "attachRequired": False,
                "podInfoOnMount": False,
                "fsGroupPolicy": "File",
                "volumeLifecycleModes": ["Persistent"],
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": config.CSI_STORAGE_CLASS},
            "provisioner": config.CSI_DRIVER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",  # one node: nothing for the scheduler to choose
            "allowVolumeExpansion": False,
        },
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {"name": config.CSI_SNAPSHOT_CLASS},
            "driver": config.CSI_DRIVER,
            "deletionPolicy": "Delete",
        },
    ]


def registered(csinode: dict[str, Any]) -> bool:
    """Whether kubelet has registered the driver: the node's CSINode lists it."""
    drivers = (csinode.get("spec") or {}).get("drivers") or []
    return any(d.get("name") == config.CSI_DRIVER and d.get("nodeID") == config.NODE_NAME for d in drivers)
