"""The Claude settings a cluster carries: managed-settings presets and profile ConfigMaps (pure).

Split from :mod:`ironflow.cluster.setup` (which re-exports these names) so the worker's
provider file in :mod:`ironflow.cluster.workloads` names the preset ConfigMaps the way the
set-up renders them. Never reads files: a profile arrives as a mapping of relative paths to
contents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors

__all__ = [
    "MANAGED_SETTINGS_PRESETS",
    "preset_configmap_name",
    "profile_configmap_name",
    "profile_configmaps",
]

_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")

#: managed-settings.json of each preset. Shared rules: no plugin marketplace, no hooks,
#: no bypass mode, no web tools, never read the credentials file.
_LOCKED: Final[dict[str, Any]] = {
    "strictKnownMarketplaces": [],
    "disableAllHooks": True,
    "permissions": {
        "disableBypassPermissionsMode": "disable",
        "deny": ["WebFetch", "WebSearch", "Read(~/.claude/.credentials.json)"],
    },
}
MANAGED_SETTINGS_PRESETS: Final[Mapping[str, Mapping[str, Any]]] = {
    "locked": _LOCKED,
    # Reads, searches and answers; changes nothing: no edit tool and no shell.
    "readonly": {
        **_LOCKED,
        "permissions": {
            "disableBypassPermissionsMode": "disable",
            "deny": [
                "Bash",
                "Edit",
                "MultiEdit",
                "NotebookEdit",
                "Write",
                "WebFetch",
                "WebSearch",
                "Read(~/.claude/.credentials.json)",
            ],
        },
    },
}


def preset_configmap_name(preset: str) -> str:
    """The ConfigMap a preset lives in, as registered on the provider (``claude-managed-locked``)."""
    return f"claude-managed-{preset}"


def profile_configmap_name(subdir: str) -> str:
    """``claude-profile`` for ``~/.claude``, ``claude-profile-rules`` for ``rules``, and so on."""
    return "claude-profile" + "".join(f"-{s.lower()}" for s in subdir.split("/") if s)


def profile_configmaps(namespace: str, files: Mapping[str, str]) -> list[dict[str, Any]]:
    """One ConfigMap per directory of a Claude profile, as kustomize's configMapGenerator makes them.

    ``files`` maps paths relative to the profile root (``CLAUDE.md``, ``rules/python.md``)
    to their contents. A key cannot contain ``/``, hence one ConfigMap per directory.
    """
    by_dir: dict[str, dict[str, str]] = {}
    for path in sorted(files):
        subdir, _, key = path.rpartition("/")
        _check_profile_path(path, subdir, key)
        by_dir.setdefault(subdir, {})[key] = files[path]
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": profile_configmap_name(subdir), "namespace": namespace},
            "data": data,
        }
        for subdir, data in by_dir.items()
    ]


def _check_profile_path(path: str, subdir: str, key: str) -> None:
    if not _KEY.fullmatch(key):
        raise errors.ConfigError(f"profile file '{path}': '{key}' is not a valid ConfigMap key; rename it")
    for segment in subdir.split("/") if subdir else ():
        if segment in {".", ".."} or not _SEGMENT.fullmatch(segment):
            raise errors.ConfigError(
                f"profile file '{path}': directory segment '{segment}' must be made of [A-Za-z0-9._-]"
            )
