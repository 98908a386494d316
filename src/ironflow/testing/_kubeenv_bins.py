"""Where the real control plane's binaries are: ``$IRONFLOW_KUBE_TESTENV_BIN`` or the kube-testenv cache.

``scripts/kube-testenv build`` builds them from pinned Go modules into
``${XDG_CACHE_HOME:-~/.cache}/ironflow/kube-testenv/<versions>/{bin,share}``; a directory
counts only when every binary is executable and kwok's CRDs are beside it, so a directory
built by an older script (without the KRO controller) is passed over, not half used.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = [
    "BINARIES",
    "CSI_BINARIES",
    "NODE_BINARIES",
    "KubeEnvNotAvailable",
    "find_bin_dir",
    "find_csi_bin_dir",
    "find_node_bin_dir",
]

BINARIES: Final = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "agent-sandbox-controller",
    "kro-controller",
)

#: The real node's (``scripts/kube-testenv build --node``), in ``kube-testenv/node_<versions>/bin``.
NODE_BINARIES: Final = (
    "kubelet",
    "kube-proxy",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runsc",
    "containerd-shim-runsc-v1",
    "kube-router",
    "coredns",
    "pause",
)

#: The CSI storage parts (``scripts/kube-testenv build --csi``, also built by ``--node``), in
#: ``kube-testenv/csi_<versions>/bin``, with the snapshot.storage.k8s.io/v1 CRDs in ``share/snapshot-crds``;
#: ``hostpath-csi`` is ironflow's own driver (a stand-in, see :mod:`._node_csi`).
CSI_BINARIES: Final = ("csi-provisioner", "csi-snapshotter", "snapshot-controller", "hostpath-csi")


class KubeEnvNotAvailable(RuntimeError):
    """The binaries are not built: run ``scripts/kube-testenv build``."""


def _find(env: str, pattern: str, complete: Callable[[Path], bool], what: str, build: str) -> Path:
    """``$env`` if set, else the newest ``kube-testenv/<pattern>`` in the cache that is complete."""
    override = os.environ.get(env)
    candidates: list[Path] = []
    if override:
        candidates.append(Path(override))
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ironflow" / "kube-testenv"
        candidates += sorted(cache.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)
    for directory in candidates:
        if complete(directory):
            return directory
    where = override or "the kube-testenv cache"
    raise KubeEnvNotAvailable(f"{what} binaries not found in {where}: run {build}")


def find_bin_dir() -> Path:
    """Where the built binaries are: ``$IRONFLOW_KUBE_TESTENV_BIN``, else the newest complete
    ``kube-testenv/*/bin`` in the cache. Raises :class:`KubeEnvNotAvailable` with the fix."""

    def complete(directory: Path) -> bool:
        share = directory.parent / "share"
        return all(os.access(directory / b, os.X_OK) for b in BINARIES) and (share / "kwok" / "crds").is_dir()

    return _find("IRONFLOW_KUBE_TESTENV_BIN", "*/bin", complete, "control-plane", "scripts/kube-testenv build")


def find_node_bin_dir() -> Path:
    """Where the real node's binaries are: ``$IRONFLOW_KUBE_TESTENV_NODE_BIN``, else the newest
    complete ``kube-testenv/node_*/bin``. Raises :class:`KubeEnvNotAvailable` with the fix."""

    def complete(directory: Path) -> bool:
        return all(os.access(directory / b, os.X_OK) for b in NODE_BINARIES)

    return _find(
        "IRONFLOW_KUBE_TESTENV_NODE_BIN", "node_*/bin", complete, "real-node", "scripts/kube-testenv build --node"
    )


def find_csi_bin_dir() -> Path:
    """Where the CSI sidecars, snapshot-controller and the driver are: ``$IRONFLOW_KUBE_TESTENV_CSI_BIN``, else the
    newest complete ``kube-testenv/csi_*/bin``. Raises :class:`KubeEnvNotAvailable` with the fix."""

    def complete(directory: Path) -> bool:
        crds = directory.parent / "share" / "snapshot-crds"
        return all(os.access(directory / b, os.X_OK) for b in CSI_BINARIES) and crds.is_dir()

    return _find(
        "IRONFLOW_KUBE_TESTENV_CSI_BIN", "csi_*/bin", complete, "CSI storage", "scripts/kube-testenv build --csi"
    )
