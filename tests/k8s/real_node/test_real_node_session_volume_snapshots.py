"""Kubernetes sessions whose HOME is a claim, snapshotted and forked as VolumeSnapshots by a CSI
driver on the real node (the node's stand-in hostpath driver with the real external-provisioner,
external-snapshotter and snapshot-controller): forks see the parent's files with their exact modes,
keep their writes, leave the parent unchanged; a snapshot outlives its session and restores byte
for byte; closing a session deletes its claim, removing a snapshot deletes its VolumeSnapshot.

The archive form of the same behaviour is ``test_real_node_session_snapshots.py``. Skipped when
the node, its CSI parts or the runner image are missing (failed under IRONFLOW_REQUIRE_REAL_NODE=1).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.k8s.real_node.session_trees import MAKE, SMALL, listing

from ironflow import labels
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import session_volumes
from ironflow.k8s.settings import SessionVolume
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.testing import _node_config as node_config
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)

FORKS = 3
VOLUME = SessionVolume(node_config.CSI_STORAGE_CLASS, snapshot_class=node_config.CSI_SNAPSHOT_CLASS)


async def _names(api: k8s.KubeApi, resource: k8s.Resource, namespace: str, selector: str) -> set[str]:
    listed = await api.list(resource, namespace, label_selector=selector)
    return {o["metadata"]["name"] for o in listed.items if not o["metadata"].get("deletionTimestamp")}


async def test_forks_and_a_restore_come_from_volume_snapshots_with_exact_modes(
    need_csi: RealNodeEnv, need_image: dict[str, str], node_ns: str, node_api: k8s.KubeApi, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_DIR", str(tmp_path / "store"))
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    homes = labels.SESSION_HOME_SELECTOR
    async with p.resources(SMALL).session_volume(VOLUME).sessions(api=node_api, transport="exec") as sessions:
        store = sessions.store
        parent = await sessions.open(OpenOptions(ttl=400))
        pod = await node_api.get(k8s.PODS, node_ns, parent.id)
        home = next(v for v in pod["spec"]["volumes"] if v["name"] == "ironflow-home")
        assert home == {"name": "ironflow-home", "persistentVolumeClaim": {"claimName": f"{parent.id}-home"}}
        claim = await node_api.get(k8s.PERSISTENTVOLUMECLAIMS, node_ns, f"{parent.id}-home")
        assert claim["status"]["phase"] == "Bound"
        assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [pod["metadata"]["uid"]]

        assert (await parent.commands.run(["sh", "-c", MAKE])).exit_code == 0
        before = await listing(parent)
        assert "./w/g d 2775" in before
        assert any(line.startswith("./w/bin f 600 ") for line in before), before

        forks = await sessions.fork(parent.id, count=FORKS)
        (fork_base,) = store.list()
        assert store.get(fork_base.id)[1]["format"] == "volumesnapshot"
        for i, fork in enumerate(forks):
            assert await listing(fork) == before  # modes exact: the driver copied the volume, nothing was unpacked
            assert (await fork.commands.run(["sh", "-c", f"echo {i} > w/mine-{i}; rm w/bin"])).exit_code == 0
        for i, fork in enumerate(forks):
            mine = await fork.commands.run(["sh", "-c", "ls w | grep -e mine- -e bin"])
            assert mine.stdout.split() == [f"mine-{i}"], mine
        assert await listing(parent) == before  # the parent is unchanged

        snap = await sessions.snapshot(parent.id, name="kept")
        taken = await node_api.get(session_volumes.VOLUME_SNAPSHOTS, node_ns, snap.id)
        assert taken["status"]["readyToUse"] is True
        assert taken["spec"]["source"] == {"persistentVolumeClaimName": f"{parent.id}-home"}
        assert snap.size_bytes > 0
        for handle in [parent, *forks]:
            await handle.close()

        async def claims_gone() -> bool:
            return not await _names(node_api, k8s.PERSISTENTVOLUMECLAIMS, node_ns, homes)

        await eventually(claims_gone, limit_s=120, interval_s=0.5, what="every session's HOME claim deleted")
        assert (await node_api.get(session_volumes.VOLUME_SNAPSHOTS, node_ns, snap.id))["status"]["readyToUse"]

        restored = await sessions.open(OpenOptions(ttl=120, from_snapshot=snap.id))
        assert await listing(restored) == before
        assert (await restored.commands.run(["sh", "-c", "w/d/x.sh; cat w/g/up"])).stdout == "hi\nro"
        await restored.close()

        assert await sessions.remove_snapshot(snap.id)
        assert await sessions.remove_snapshot(fork_base.id)
        assert store.list() == []

    async def snapshots_gone() -> bool:
        return not await _names(node_api, session_volumes.VOLUME_SNAPSHOTS, node_ns, labels.MANAGED_SELECTOR)

    await eventually(snapshots_gone, limit_s=120, interval_s=0.5, what="every VolumeSnapshot deleted")
