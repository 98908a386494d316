"""On a real node with CSI storage (``RealNodeEnv(csi=True)``): a workspace volume taken as a
VolumeSnapshot and as a PVC clone keeps its bytes, modes, owners, mtimes and symlinks (read on runc
and on gVisor), each copy parts from its source, a read-only mount refuses a write, no mount
outlives its pods, and deleting the copies removes their data from the driver.

The driver is ironflow's own hostpath stand-in (``scripts/kube-testenv.d/hostpath-csi``), behind
the upstream csi-provisioner, csi-snapshotter and snapshot-controller. Pods run as ironflow's do
(non-root, fsGroup = uid, Pod Security ``restricted``), with ``fsGroupChangePolicy: OnRootMismatch``:
under the default (``Always``) kubelet adds group read-write to every file of the volume at each
mount, so modes would not survive a restore unchanged whatever the driver copies. Each pod's
findings come back as its termination message. Skipped when the CSI parts or the runner image are
not built.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any, Final

import pytest

from ironflow.k8s import hardening
from ironflow.testing import _node_config as config
from ironflow.testing.kubeenv import KubeEnvError
from ironflow.testing.polling import eventually_sync
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)

UID: Final = 10001
#: Distinct modes (a dir of 0700 too), a symlink, an old mtime and 1 MiB of random bytes.
WRITE: Final = """
mkdir sub
printf 'plain text\\n' > sub/plain.txt && chmod 0640 sub/plain.txt
printf 'read only\\n' > sub/ro && chmod 0444 sub/ro
printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 0750 run.sh
printf 'only mine\\n' > private && chmod 0600 private
head -c 1048576 /dev/urandom > random.bin && chmod 0604 random.bin
ln -s sub/plain.txt link
touch -d '2001-02-03 04:05:06' sub/plain.txt
chmod 0700 sub
"""
#: Every entry's path, mode, owner, size, mtime (ns) and link target, then every file's digest.
MANIFEST: Final = (
    "find . -mindepth 1 -printf '%P %m %U:%G %s %T@ %l\\n' | LC_ALL=C sort"
    " && find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2"
)
#: A write into a copy: one file changed, one removed, one added.
SCRIBBLE: Final = "printf 'changed\\n' > sub/plain.txt && rm random.bin && printf 'new\\n' > added"


def _claim(name: str, source: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "storageClassName": config.CSI_STORAGE_CLASS,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "64Mi"}},
    }
    if source is not None:
        spec["dataSource"] = source
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def _run_pod(
    node: RealNodeEnv, ns: str, image: str, claim: str, script: str, *, read_only: bool = False, gvisor: bool = False
) -> str:
    """Run ``script`` in /data (the claim's volume, mounted read-only if asked) in a restricted pod,
    on runc or gVisor; return what it printed."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    settings = hardening.SandboxSettings(run_as_user=UID)
    pod_security = {**hardening.pod_security_context(settings), "fsGroupChangePolicy": "OnRootMismatch"}
    container = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", f"{{ set -eu; cd /data\n{script}\n}} >/dev/termination-log 2>&1"],
        "securityContext": hardening.container_security_context(settings),
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": pod_security,
        "containers": [container],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}],
    }
    if gvisor:
        spec["runtimeClassName"] = "gvisor"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    node.apply_objects([pod], namespace=ns)
    done = node.wait_pod(ns, name, lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"), timeout=180)
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    node.request("DELETE", path)
    eventually_sync(lambda: _gone_from_api(node, path), limit_s=120, interval_s=0.2, what=f"pod {name} gone")
    assert done["status"]["phase"] == "Succeeded", f"exit {terminated['exitCode']}: {terminated.get('message')}"
    return str(terminated.get("message", ""))


def _gone_from_api(node: RealNodeEnv, path: str) -> bool:
    try:
        node.request("GET", path)
    except KubeEnvError:
        return True
    return False


def _bound_volume(node: RealNodeEnv, ns: str, claim: str) -> str:
    """Wait for the claim to be bound; return its volume's handle (the driver's directory name)."""

    def bound() -> str:
        pvc = node.request("GET", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}")
        if pvc.get("status", {}).get("phase") != "Bound":
            return ""
        pv = node.request("GET", f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
        return str(pv["spec"]["csi"]["volumeHandle"])

    return str(eventually_sync(bound, limit_s=120, interval_s=0.5, what=f"claim {claim} Bound"))


def _ready_snapshot(node: RealNodeEnv, ns: str, name: str) -> dict[str, Any]:
    """Wait for the VolumeSnapshot to be ready to use; return its status."""

    def ready() -> dict[str, Any]:
        snap = node.request("GET", f"/apis/snapshot.storage.k8s.io/v1/namespaces/{ns}/volumesnapshots/{name}")
        status: dict[str, Any] = snap.get("status") or {}
        assert not status.get("error"), status["error"]
        return status if status.get("readyToUse") else {}

    return dict(eventually_sync(ready, limit_s=120, interval_s=0.5, what=f"snapshot {name} readyToUse"))


def _gone(path: Path) -> bool:
    return not path.exists() and not path.with_name(path.name + ".json").exists()


def test_a_snapshot_and_a_clone_copy_the_volume_and_part_from_it(
    need_csi: RealNodeEnv, node_ns: str, need_image: dict[str, str]
) -> None:
    node, ns, image = need_csi, node_ns, need_image["runner"]
    state = node.csi_state_dir
    node.apply_objects([_claim("source")], namespace=ns)
    source_volume = _bound_volume(node, ns, "source")
    original = _run_pod(node, ns, image, "source", f"{WRITE}\n{MANIFEST}")
    assert "random.bin 604 10001:10001 1048576 " in original, original
    assert re.search(r"^link 777 10001:10001 \S+ \S+ sub/plain.txt$", original, re.MULTILINE), original
    assert (state / "volumes" / source_volume / "random.bin").stat().st_size == 1048576

    snapshot = {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {"name": "snap"},
        "spec": {
            "volumeSnapshotClassName": config.CSI_SNAPSHOT_CLASS,
            "source": {"persistentVolumeClaimName": "source"},
        },
    }
    node.apply_objects([snapshot], namespace=ns)
    status = _ready_snapshot(node, ns, "snap")
    assert status["restoreSize"] == "64Mi", status
    content = node.request(
        "GET", f"/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents/{status['boundVolumeSnapshotContentName']}"
    )
    snapshot_dir = state / "snapshots" / content["status"]["snapshotHandle"]
    assert (snapshot_dir / "sub" / "plain.txt").read_text() == "plain text\n"

    snap_source = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap"}
    clone_source = {"kind": "PersistentVolumeClaim", "name": "source"}
    copies = {}
    for claim, source, gvisor in (("restored", snap_source, False), ("clone", clone_source, True)):
        node.apply_objects([_claim(claim, source)], namespace=ns)
        copies[claim] = _bound_volume(node, ns, claim)
        seen = _run_pod(node, ns, image, claim, f"{MANIFEST}\n{SCRIBBLE}\ncat sub/plain.txt", gvisor=gvisor)
        assert seen == original + "changed\n", f"{claim} differs:\n{seen}\n--- source:\n{original}"
        again = _run_pod(node, ns, image, "source", f"{MANIFEST}\n! touch probe 2>/dev/null", read_only=True)
        assert again == original, f"writing {claim} changed the source, or a read-only mount was writable"
    assert (
        _run_pod(node, ns, image, "restored", "cat sub/plain.txt\nls") == "changed\nadded\nlink\nprivate\nrun.sh\nsub\n"
    )

    def csi_mounts() -> list[str]:  # in the node's mount namespace (the holder's)
        lines = Path(f"/proc/{node.holder_pid}/mountinfo").read_text().splitlines()
        return [line for line in lines if "kubernetes.io~csi" in line]

    eventually_sync(
        lambda: not csi_mounts(),
        limit_s=60,
        interval_s=0.5,
        what=lambda: f"no CSI mount once the pods are gone: {csi_mounts()}\n{node.component_log('hostpath-csi')}",
    )
    node.request("DELETE", f"/apis/snapshot.storage.k8s.io/v1/namespaces/{ns}/volumesnapshots/snap")
    for claim in ("restored", "clone", "source"):
        node.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}")
    dirs = [snapshot_dir, *(state / "volumes" / v for v in (source_volume, *copies.values()))]
    eventually_sync(
        lambda: all(_gone(d) for d in dirs),
        limit_s=120,
        interval_s=0.5,
        what=lambda: f"the driver to delete {[d.name for d in dirs if not _gone(d)]}",
    )
