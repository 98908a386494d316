"""Where a pinned tool that a ``scripts/`` build puts in ironflow's cache lives (Helm, the Temporal CLI)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["tool_path"]


def tool_path(override_env: str, *parts: str) -> Path:
    """``$override_env``, else ``${XDG_CACHE_HOME:-~/.cache}/ironflow/<parts…>`` (the caller checks it is there)."""
    override = os.environ.get(override_env)
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "ironflow", *parts)
