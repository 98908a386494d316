"""The managed settings ironflow ships, mounted at /etc/claude-code as the provider mounts them
(or as the runner image bakes them), are obeyed by the real pinned Claude Code CLI:

* ``readonly`` denies Bash even when the step allows it; ``locked`` lets it run (the control);
* both presets deny reading ``~/.claude/.credentials.json``, while other files stay readable;
* the image's baked default disables hooks a profile's settings.json would run.

The CLI runs under bubblewrap (so /etc/claude-code exists only inside, nothing is written to
the host) against the offline FakeAnthropic, which scripts the tool call.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.claude import layout
from ironflow.claude.cli import find_claude_cli
from ironflow.cluster import dockerfile, setup
from ironflow.fake_model.server import FakeAnthropic, Script, ToolUseTurn

pytestmark = [pytest.mark.claude_cli, pytest.mark.bwrap]

BWRAP = shutil.which("bwrap")
DOCKERFILE = Path(__file__).resolve().parents[3] / "docker" / "claude-runner" / "Dockerfile"


def _etc_with(settings_dir: Path) -> list[str]:
    """A read-only root whose /etc is the host's plus /etc/claude-code."""
    args = ["--ro-bind", "/", "/", "--tmpfs", "/etc"]
    for entry in sorted(Path("/etc").iterdir()):
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry), str(entry)]
        elif entry.name != "claude-code":
            args += ["--ro-bind", str(entry), str(entry)]
    return [*args, "--ro-bind", str(settings_dir), layout.MANAGED_SETTINGS_DIR, "--dev", "/dev", "--proc", "/proc"]


def _preset(name: str) -> str:
    text = setup.render(setup.ClusterSetup(presets=(name,)))[-1]["data"][layout.MANAGED_SETTINGS_FILE]
    assert isinstance(text, str)
    return text


def _baked_default() -> str:
    """The JSON the Dockerfile's RUN writes to /etc/claude-code/managed-settings.json."""
    match = re.search(r"printf '%s\\n' '(\{.*?\})'", DOCKERFILE.read_text())
    assert match is not None
    return match.group(1)


async def _tool_result(
    tmp_path: Path, settings: str, tool: str, tool_input: dict[str, Any], *, home_files: dict[str, str] | None = None
) -> str:
    """Run one scripted tool call under ``settings``; the tool result the CLI sent back, as JSON."""
    if BWRAP is None:
        pytest.skip("bubblewrap is not installed")
    try:
        claude = find_claude_cli()
    except errors.ConfigError as exc:
        pytest.skip(f"Claude Code CLI not installed: {exc}")
    settings_dir = tmp_path / "managed"
    settings_dir.mkdir()
    (settings_dir / layout.MANAGED_SETTINGS_FILE).write_text(settings)
    home = tmp_path / "home"
    for name, text in (home_files or {}).items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    home.mkdir(exist_ok=True)
    inputs = {k: v.replace("$HOME", str(home)) if isinstance(v, str) else v for k, v in tool_input.items()}
    async with FakeAnthropic(Script.of(ToolUseTurn(tool, inputs), "done")) as fake:
        proc = await asyncio.create_subprocess_exec(
            BWRAP,
            *_etc_with(settings_dir),
            "--tmpfs", "/tmp",  # the CLI writes /tmp/claude-<uid>
            "--bind", str(tmp_path), str(tmp_path),
            "--",
            claude, "-p", "Run it", "--output-format", "json", "--model", "sonnet", "--allowedTools", tool,
            env=fake.cli_env(home),
            cwd=home,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, (out.decode(), err.decode())
        requests = fake.message_requests
    assert len(requests) == 2, "the CLI must send the tool result back"
    (result,) = requests[1].tool_results()
    return json.dumps(result)


BASH = {"command": "echo marker-$((6*7))"}


async def test_readonly_preset_denies_bash_even_when_the_step_allows_it(tmp_path: Path) -> None:
    result = await _tool_result(tmp_path, _preset("readonly"), "Bash", BASH)
    assert "marker-42" not in result
    assert '"is_error": true' in result
    assert "Bash is disabled" in result


async def test_locked_preset_lets_an_allowed_bash_run(tmp_path: Path) -> None:
    """The control: the same step under ``locked`` runs the command, so the denial above is the preset's."""
    result = await _tool_result(tmp_path, _preset("locked"), "Bash", BASH)
    assert "marker-42" in result


@pytest.mark.parametrize("preset", sorted(setup.MANAGED_SETTINGS_PRESETS))
async def test_presets_deny_reading_the_credentials_file(tmp_path: Path, preset: str) -> None:
    files = {".claude/.credentials.json": '{"marker": "credential-marker-7"}'}
    result = await _tool_result(
        tmp_path, _preset(preset), "Read", {"file_path": "$HOME/.claude/.credentials.json"}, home_files=files
    )
    assert "credential-marker-7" not in result
    assert '"is_error": true' in result


async def test_presets_still_let_the_agent_read_other_files(tmp_path: Path) -> None:
    """The control for the credentials denial: Read itself works under the preset."""
    files = {"notes.txt": "notes-marker-9"}
    result = await _tool_result(
        tmp_path, _preset("readonly"), "Read", {"file_path": "$HOME/notes.txt"}, home_files=files
    )
    assert "notes-marker-9" in result


HOOK_SETTINGS = json.dumps(
    {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "touch $HOME/hook-ran"}]}]}}
)


@pytest.mark.parametrize(("settings", "hook_runs"), [("{}", True), (None, False)], ids=["no managed settings", "baked"])
async def test_the_images_baked_settings_disable_profile_hooks(
    tmp_path: Path, settings: str | None, hook_runs: bool
) -> None:
    """A profile's settings.json hook runs without managed settings, and never under the image's default."""
    assert dockerfile.lint_runner_dockerfile(dockerfile.parse_dockerfile(DOCKERFILE.read_text())) == []
    files = {".claude/settings.json": HOOK_SETTINGS}
    managed = settings if settings is not None else _baked_default()
    result = await _tool_result(tmp_path, managed, "Bash", BASH, home_files=files)
    assert "marker-42" in result
    assert (tmp_path / "home" / "hook-ran").exists() is hook_runs
