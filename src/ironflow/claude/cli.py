"""Where the pinned Claude Code CLI lives on this machine (worker side, reads env and disk).

The version is pinned because the output contract (§1.10) and the request shape the
offline Anthropic fake answers were read from that version; a different CLI may print
different fields. Never downloads anything: ``bash scripts/install`` does that.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ironflow import errors

__all__ = [
    "CLAUDE_CLI_ENV",
    "CLAUDE_CODE_VERSION",
    "INSTALL_COMMAND",
    "find_claude_cli",
    "install_hint",
    "pinned_cli_path",
]

#: The Claude Code release ironflow is tested against.
CLAUDE_CODE_VERSION: Final = "2.1.332"
#: Points at a ``claude`` executable to use instead of the pinned one.
CLAUDE_CLI_ENV: Final = "IRONFLOW_CLAUDE_CLI"
INSTALL_COMMAND: Final = "bash scripts/install"


def install_hint(pinned: Path) -> str:
    """How to put the pinned CLI at ``pinned``: npm for a pip install (it has no scripts/), or the
    checkout's install script, which runs the same npm command."""
    prefix = pinned.parents[2]  # <cache>/ironflow/claude-code/<version>, above node_modules/.bin/claude
    return (
        f"install it with `npm install --prefix {prefix} @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}` "
        f"(in a checkout of ironflow, `{INSTALL_COMMAND}` does this), or set ${CLAUDE_CLI_ENV} to a claude binary"
    )


def pinned_cli_path(env: Mapping[str, str] | None = None) -> Path:
    """Where ``scripts/install`` puts the pinned CLI: under ``$XDG_CACHE_HOME`` (or ``~/.cache``)."""
    env = os.environ if env is None else env
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "ironflow" / "claude-code" / CLAUDE_CODE_VERSION / "node_modules" / ".bin" / "claude"


def find_claude_cli(env: Mapping[str, str] | None = None) -> str:
    """The ``claude`` executable to run: ``$IRONFLOW_CLAUDE_CLI``, the pinned install, then PATH.

    Raises:
        ConfigError: none is found, or ``$IRONFLOW_CLAUDE_CLI`` names no executable file.
    """
    env = os.environ if env is None else env
    explicit = env.get(CLAUDE_CLI_ENV)
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return explicit
        raise errors.ConfigError(
            f"{CLAUDE_CLI_ENV}={explicit} is not an executable file; "
            f"unset it or point it at a claude binary ({install_hint(pinned_cli_path(env))})"
        )
    pinned = pinned_cli_path(env)
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    on_path = shutil.which("claude", path=env.get("PATH"))
    if on_path:
        return on_path
    raise errors.ConfigError(
        f"Claude Code CLI {CLAUDE_CODE_VERSION} not found (looked at ${CLAUDE_CLI_ENV}, {pinned} and PATH); "
        + install_hint(pinned)
    )
