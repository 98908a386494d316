"""The real snapshot-controller (external-snapshotter v8) beside the real-API tier's cluster, as a fixture.

``scripts/kube-testenv build --csi`` (also run by ``build --node``) builds ``snapshot-controller``
from its pinned Go module into ``kube-testenv/csi_<versions>/bin`` and copies the
snapshot.storage.k8s.io/v1 CRDs (VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent) from
the same release's client module into ``share/snapshot-crds``. :func:`snapshot_env` installs those
CRDs on the session's :class:`~ironflow.testing.kubeenv.KubeEnv` and runs the controller as a
subprocess (no leader election; the group-snapshot kinds off, their CRDs are not installed), once
per test session; it skips, with the fix, when the binary is not built. No CSI driver runs here:
what the controller does alone (binding snapshots to contents, reporting errors) is what it shows.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from ironflow.testing._kubeenv_bins import KubeEnvNotAvailable, find_csi_bin_dir
from ironflow.testing._kubeenv_procs import Processes
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.ports import free_port

__all__ = ["SnapshotEnv", "snapshot_env"]

BINARY: Final = "snapshot-controller"


@dataclass
class SnapshotEnv:
    """The cluster, with the snapshot CRDs installed and snapshot-controller running against it."""

    kube: KubeEnv
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        """The end of the controller's log, for failure messages."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _metrics_served(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        return bool(resp.status == 200)


@pytest.fixture(scope="session")
def snapshot_env(kube_env: KubeEnv) -> Iterator[SnapshotEnv]:
    """The snapshot CRDs on the session's cluster and snapshot-controller running; skipped when not built."""
    try:
        bin_dir = find_csi_bin_dir()
    except KubeEnvNotAvailable as exc:
        pytest.skip(str(exc))
    kube_env.install_crds(sorted((bin_dir.parent / "share" / "snapshot-crds").glob("*.yaml")))
    workdir = Path(tempfile.mkdtemp(prefix="ironflow-snapshot-controller-"))
    procs, metrics = Processes(bin_dir), free_port()
    args = [
        f"--kubeconfig={kube_env.kubeconfig_path}",
        "--leader-election=false",
        f"--http-endpoint=127.0.0.1:{metrics}",
        "--feature-gates=CSIVolumeGroupSnapshot=false",  # their CRDs are not installed
        "--retry-interval-max=5s",
        "--v=4",
    ]
    try:  # dies with this run, even a killed one (as the cluster's components do)
        procs.spawn(BINARY, args, cwd=workdir, log_dir=workdir)
        procs.wait(lambda: _metrics_served(metrics), BINARY, "snapshot-controller's metrics endpoint")
        yield SnapshotEnv(kube_env, workdir / f"{BINARY}.log")
    finally:
        procs.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # its log went into the failures that needed it
