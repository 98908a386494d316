"""The node's own small images (pause, CoreDNS): one static binary on ``scratch``, as a docker archive.

Why not buildah: an image of one file needs no build, and a docker archive (``docker save``'s
format) is a manifest, a config and a layer tar that ``ctr images import`` loads as it is. The
archive is byte-for-byte reproducible (fixed mtimes, owners and order), so its content never
changes unless the binary does.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["scratch_archive"]


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def scratch_archive(
    out: Path, reference: str, binary: Path, *, entrypoint: Sequence[str], user: str = "65535:65535"
) -> Path:
    """Write a docker archive of ``reference``: ``binary`` at ``entrypoint[0]``, run as ``user``."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        _add(layer, entrypoint[0].lstrip("/"), binary.read_bytes(), 0o755)
    layer_bytes = layer_buf.getvalue()
    diff_id = hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "User": user},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created_by": f"ironflow: {Path(entrypoint[0]).name} on scratch"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [f"{diff_id}/layer.tar"]}]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, config_name, config_bytes)
        _add(tar, f"{diff_id}/layer.tar", layer_bytes)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    tmp.replace(out)
    return out
