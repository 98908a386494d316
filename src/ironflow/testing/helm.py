"""Where the pinned Helm CLI is, and a thin runner for it, for the chart tests.

``scripts/helm build`` builds ``helm.sh/helm/v3`` from its pinned Go module into
``${XDG_CACHE_HOME:-~/.cache}/ironflow/helm/<version>/bin/helm`` (or ``$IRONFLOW_HELM`` names
a binary). Tests skip with :class:`HelmNotAvailable`'s message when it is not built. Helm runs
with its home, cache and config directories under a throwaway directory, so it never reads or
writes the user's repositories or plugins.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from ironflow.testing._cached_tools import tool_path

__all__ = ["HELM_VERSION", "HelmNotAvailable", "find_helm", "run_helm"]

#: The pinned version ``scripts/helm`` builds (a unit test keeps the two equal).
HELM_VERSION: Final = "3.22.0"
_TIMEOUT_S: Final = 60.0


class HelmNotAvailable(RuntimeError):
    """Helm is not built; the message names the command that builds it."""


def find_helm() -> Path:
    """The ``helm`` binary: ``$IRONFLOW_HELM``, else the pinned build in the cache.

    Raises:
        HelmNotAvailable: not built, naming the command that builds it.
    """
    path = tool_path("IRONFLOW_HELM", "helm", HELM_VERSION, "bin", "helm")
    if not os.access(path, os.X_OK):
        raise HelmNotAvailable(f"helm is not built at {path}: run scripts/helm build")
    return path


def run_helm(*args: str, helm: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``helm ARGS`` with private home directories; the finished process (not checked)."""
    binary = helm or find_helm()
    with tempfile.TemporaryDirectory(prefix="ironflow-helm-") as home:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": home,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, timeout=_TIMEOUT_S, check=False
        )
