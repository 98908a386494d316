"""A namespace where kwok runs ``pods/exec`` on this host, and the one-container pod to exec into,
for the real-API tests of exec (``KubeApi.exec``, ``ironflow check``'s account)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ironflow.testing.kubeenv import KubeEnv

__all__ = ["POD", "exec_namespace"]

POD: Final[dict[str, Any]] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "box"},
    "spec": {"containers": [{"name": "main", "image": "img"}], "restartPolicy": "Never"},
}


@contextlib.contextmanager
def exec_namespace(env: KubeEnv, work_dir: Path, prefix: str = "exec") -> Iterator[str]:
    """A fresh namespace whose execs kwok runs in ``work_dir`` (removed after)."""
    with env.namespace(f"{prefix}-{uuid.uuid4().hex[:8]}") as name:
        env.allow_exec(name, work_dir)
        yield name
