"""Claude profile ConfigMaps: subdir rules, mount paths and the copy prefix (pure).

A profile is a ConfigMap of files (CLAUDE.md, settings.json, agents, rules...) that a
step finds under ``~/.claude`` or a subdir of it. Each is mounted read-only at
``/etc/ironflow/claude-profile/<index>`` and copied into HOME by the command prefix,
because Claude Code must be able to write ``~/.claude``. Invariant: an accepted subdir
never escapes ``~/.claude`` (no absolute path, no ``.``/``..``, no empty segment, only
``[A-Za-z0-9._-]``), so the unquoted part of the destination cannot be shell syntax.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ironflow import errors
from ironflow.claude import command, layout

__all__ = [
    "ClaudeProfile",
    "add_profile",
    "profile_copy_prefix",
    "profile_destination",
    "profile_mount_path",
    "validate_profile_subdir",
]

_SEGMENT: Final = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class ClaudeProfile:
    """A ConfigMap copied into ``~/.claude/<subdir>`` (``subdir`` empty: ``~/.claude``)."""

    configmap: str
    subdir: str = ""


def validate_profile_subdir(subdir: str) -> str | None:
    """Why ``subdir`` is not a safe place under ``~/.claude``, or None when it is.

    >>> validate_profile_subdir("agents/review") is None
    True
    >>> validate_profile_subdir("../etc")
    "contains a '..' segment"
    """
    if subdir == "":
        return None
    if subdir.startswith("/"):
        return "must be relative to ~/.claude"
    for segment in subdir.split("/"):
        if segment == "":
            return "contains an empty segment"
        if segment in (".", ".."):
            return f"contains a '{segment}' segment"
        if not _SEGMENT.fullmatch(segment):
            return f"segment '{segment}' has a char outside [A-Za-z0-9._-]"
    return None


def add_profile(profiles: Sequence[ClaudeProfile], configmap: str, subdir: str = "") -> tuple[ClaudeProfile, ...]:
    """``profiles`` plus a new one, in call order; the provider builders call this.

    Raises:
        ConfigError: the subdir is unsafe, or already mapped to another ConfigMap.
    """
    reason = validate_profile_subdir(subdir)
    if reason is not None:
        raise errors.ConfigError(f"invalid claude profile subdir '{subdir}': {reason}")
    for existing in profiles:
        if existing.subdir == subdir:
            raise errors.ConfigError(
                f"claude profile subdir '{subdir}' is already mapped to ConfigMap '{existing.configmap}'"
            )
    return (*profiles, ClaudeProfile(configmap, subdir))


def profile_mount_path(index: int, *, mount_root: str = layout.PROFILE_MOUNT_DIR) -> str:
    """Read-only mount of the ``index``-th profile: siblings, so none hides another."""
    return f"{mount_root}/{index}"


def profile_destination(subdir: str) -> str:
    """Shell word for the copy destination; ``$HOME`` stays expandable, the subdir quoted."""
    if subdir == "":
        return '"$HOME/.claude"'
    return '"$HOME/.claude/"' + command.shell_quote(subdir)


def profile_copy_prefix(profiles: Sequence[ClaudeProfile], *, mount_root: str = layout.PROFILE_MOUNT_DIR) -> str:
    """Shell that copies each profile's keys into HOME, aborting the command on a failure.

    The glob pair takes regular and dot files (``.mcp.json``) but skips the kubelet's
    ``..data`` link and ``..<timestamp>`` dir; ``cp -L`` copies the files, not the links.
    ``mount_root`` is where the sandbox mounts the profiles (the pod's layout by default).
    """
    parts: list[str] = []
    for index, profile in enumerate(profiles):
        src = command.shell_quote(profile_mount_path(index, mount_root=mount_root))
        dest = profile_destination(profile.subdir)
        parts.append(
            f"mkdir -p {dest} && for f in {src}/* {src}/.[!.]*; do "
            f'[ -e "$f" ] || continue; cp -L "$f" {dest}/ || exit 1; done && '
        )
    return "".join(parts)
