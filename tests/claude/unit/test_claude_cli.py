"""Locating the Claude Code CLI: explicit env, then the pinned install, then PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.claude.cli import CLAUDE_CODE_VERSION, find_claude_cli, pinned_cli_path


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_pinned_path_follows_xdg_cache_home_then_home(tmp_path: Path) -> None:
    tail = Path("ironflow/claude-code") / CLAUDE_CODE_VERSION / "node_modules/.bin/claude"
    assert pinned_cli_path({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / tail
    assert pinned_cli_path({"HOME": str(tmp_path)}) == tmp_path / ".cache" / tail


def test_explicit_env_wins(tmp_path: Path) -> None:
    explicit = executable(tmp_path / "my-claude")
    executable(pinned_cli_path({"XDG_CACHE_HOME": str(tmp_path)}))
    env = {"IRONFLOW_CLAUDE_CLI": str(explicit), "XDG_CACHE_HOME": str(tmp_path), "PATH": ""}
    assert find_claude_cli(env) == str(explicit)


def test_explicit_env_naming_no_executable_is_refused_with_the_fix(tmp_path: Path) -> None:
    env = {"IRONFLOW_CLAUDE_CLI": str(tmp_path / "absent"), "PATH": ""}
    with pytest.raises(errors.ConfigError, match=r"IRONFLOW_CLAUDE_CLI=.*absent is not an executable"):
        find_claude_cli(env)


def test_pinned_install_comes_before_path(tmp_path: Path) -> None:
    pinned = executable(pinned_cli_path({"XDG_CACHE_HOME": str(tmp_path / "cache")}))
    on_path = executable(tmp_path / "bin" / "claude")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": str(on_path.parent)}
    assert find_claude_cli(env) == str(pinned)


def test_path_is_the_last_resort(tmp_path: Path) -> None:
    on_path = executable(tmp_path / "bin" / "claude")
    env = {"XDG_CACHE_HOME": str(tmp_path / "empty"), "PATH": str(on_path.parent)}
    assert find_claude_cli(env) == str(on_path)


def test_nothing_found_names_the_install_command(tmp_path: Path) -> None:
    """A pip user has no scripts/install (issue 17): the npm command comes first, the script second."""
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": str(tmp_path)}
    with pytest.raises(errors.ConfigError, match="bash scripts/install") as caught:
        find_claude_cli(env)
    prefix = tmp_path / "ironflow" / "claude-code" / CLAUDE_CODE_VERSION
    assert f"`npm install --prefix {prefix} @anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}`" in str(caught.value)


def test_non_executable_pinned_file_is_skipped(tmp_path: Path) -> None:
    pinned = pinned_cli_path({"XDG_CACHE_HOME": str(tmp_path)})
    pinned.parent.mkdir(parents=True)
    pinned.write_text("not executable")
    os.chmod(pinned, 0o644)
    with pytest.raises(errors.ConfigError):
        find_claude_cli({"XDG_CACHE_HOME": str(tmp_path), "PATH": ""})
