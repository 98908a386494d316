"""The runner Dockerfile's version check, run against the real pinned Claude Code CLI: the build
fails unless the installed CLI reports the build argument's version."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ironflow.cluster import dockerfile

RUNNER_DIR = Path(__file__).resolve().parents[3] / "docker" / "claude-runner"
DOCKERFILE = (RUNNER_DIR / "Dockerfile").read_text(encoding="utf-8")
VERSION = (RUNNER_DIR / "CLAUDE_CODE_VERSION").read_text(encoding="utf-8").strip()


def _verification_script() -> str:
    """The version check of the Dockerfile's install RUN, without the npm install itself."""
    for run in dockerfile.parse_dockerfile(DOCKERFILE).of("RUN"):
        if "claude --version" in run.args:
            return " && ".join(part for part in run.args.split(" && ") if part.startswith((":", "test ")))
    raise AssertionError("no RUN checks claude --version")


@pytest.mark.claude_cli
@pytest.mark.parametrize(("version", "passes"), [(VERSION, True), ("2.0.0", False), ("", False)])
def test_build_version_check_accepts_only_the_version_the_real_cli_reports(version: str, passes: bool) -> None:
    """The Dockerfile's check, run against the pinned Claude Code CLI, fails the build on a mismatch."""
    cli = pytest.importorskip("ironflow.claude.cli")
    try:
        claude = Path(cli.find_claude_cli())
    except Exception as exc:  # the CLI is installed by scripts/install
        pytest.skip(f"Claude Code CLI not installed: {exc}")
    env = {
        "PATH": f"{claude.parent}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "CLAUDE_CODE_VERSION": version,
    }
    result = subprocess.run(["sh", "-c", _verification_script()], env=env, capture_output=True, timeout=30, check=False)
    assert (result.returncode == 0) is passes, result.stderr
