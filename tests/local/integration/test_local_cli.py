"""`ironflow agent` and `ironflow exec` as a user runs them: answer on stdout, documented exit codes."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tests.fakes import sandbox_cli

from ironflow import errors
from ironflow.claude import cli

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def _has_cli() -> bool:
    try:
        cli.find_claude_cli()
    except errors.ConfigError:
        return False
    return True


needs_cli = pytest.mark.skipif(not _has_cli(), reason="Claude Code CLI not installed (run scripts/install)")


ironflow = sandbox_cli.ironflow_process


@needs_cli
@pytest.mark.claude_cli
def test_quickstart_prints_the_fake_models_answer_from_the_real_cli() -> None:
    done = ironflow("agent", "--fake-model", "Say hello from the sandbox")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello from the sandbox! (offline fake model)"
    assert done.stderr == ""  # not a terminal: no progress output


@needs_cli
@pytest.mark.claude_cli
def test_fake_model_script_file_and_json_output(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("turns:\n  - text: scripted answer\n")
    done = ironflow("agent", "hi", f"--fake-model={script}", "-o", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["value"] == "scripted answer"
    assert out["model"]
    assert set(out) >= {"session_id", "duration_ms", "cost_usd", "environment_id", "ignored_settings"}


@needs_cli
@pytest.mark.claude_cli
def test_a_model_error_is_a_failed_step_exit_1(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(
        "turns:\n  - error: {status: 400, type: invalid_request_error, message: bad}\n"
        "default: {error: {status: 400, type: invalid_request_error, message: bad}}\n"
    )
    done = ironflow("agent", "hi", f"--fake-model={script}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("error: ")


@needs_cli
@pytest.mark.claude_cli
def test_agent_timeout_bounds_the_step_and_the_failure_names_the_steps_bound(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("turns:\n  - text: late\n    delay_s: 20\n")  # unbounded, the step would answer "late"
    done = ironflow("agent", "hi", f"--fake-model={script}", "--timeout", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == "error: agent timed out after 2s (the step's timeout)"


def test_no_credential_and_no_fake_model_is_bad_input_naming_the_fix() -> None:
    done = ironflow("agent", "hi")
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert "CLAUDE_CODE_OAUTH_TOKEN" in done.stderr
    assert "--fake-model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_missing_script_file_is_bad_input() -> None:
    done = ironflow("agent", "hi", "--fake-model=/does/not/exist.yaml")
    assert done.returncode == 2
    assert "/does/not/exist.yaml" in done.stderr


def test_k8s_backend_without_provider_file_is_bad_input() -> None:
    done = ironflow("agent", "--backend", "k8s", "hi")
    assert done.returncode == 2
    assert "--provider" in done.stderr


def test_k8s_backend_with_an_unknown_provider_setting_is_bad_input(tmp_path: Path) -> None:
    provider_file = tmp_path / "provider.yaml"
    provider_file.write_text("imagez: x\n")
    done = ironflow("agent", "--backend", "k8s", "--provider", str(provider_file), "hi")
    assert done.returncode == 2
    assert "imagez" in done.stderr


def test_exec_passes_the_commands_output_and_exit_code_through() -> None:
    done = ironflow("exec", "--", "sh", "-c", "id -u; echo oops >&2; exit 7")
    assert done.returncode == 7
    assert done.stdout == "10001\n"
    assert done.stderr == "oops\n"


def test_exec_timeout_is_a_failed_step_that_prints_what_the_command_wrote() -> None:
    done = ironflow("exec", "--timeout", "2", "--", "sh", "-c", "echo started; echo warming >&2; sleep 30")
    assert done.returncode == 1
    assert done.stdout == "started\n"
    assert done.stderr == "warming\nerror: command timed out after 2s\n"


def test_exec_streams_the_commands_output_as_it_comes() -> None:
    """Both lines arrive while the command still runs (held output would come only at its 40 s timeout)."""
    base = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    script = "echo first; echo early >&2; sleep 60"
    argv = [sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec", "--timeout", "40", "--"]
    with subprocess.Popen(
        [*argv, "sh", "-c", script], env=base, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        got = {proc.stdout.fileno(): b"", proc.stderr.fileno(): b""}
        deadline = time.monotonic() + 20
        while not all(v.endswith(b"\n") for v in got.values()) and time.monotonic() < deadline:
            ready, _, _ = select.select(list(got), [], [], max(deadline - time.monotonic(), 0))
            for fd in ready:
                got[fd] += os.read(fd, 4096)
        still_running = proc.poll() is None
        proc.terminate()  # bubblewrap --die-with-parent ends the sandbox with it
        proc.wait(timeout=30)
    assert list(got.values()) == [b"first\n", b"early\n"]
    assert still_running


def test_exec_passes_binary_output_through_byte_for_byte() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec", "--", "printf", r"\377\000x\n"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, b"\xff\x00x\n")


def test_exec_prints_the_same_document_as_yaml_as_json(tmp_path: Path) -> None:
    as_json = ironflow("exec", "-o", "json", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    as_yaml = ironflow("exec", "-o", "yaml", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (as_json.returncode, as_yaml.returncode) == (3, 3)
    assert as_yaml.stdout.startswith("exit_code: 3\n")
    shown, expected = yaml.safe_load(as_yaml.stdout), json.loads(as_json.stdout)
    assert shown.pop("duration_s") > 0  # each run's own
    expected.pop("duration_s")
    assert shown == expected


def test_exec_without_a_command_is_bad_input() -> None:
    done = ironflow("exec")
    assert done.returncode == 2
    assert "missing command" in done.stderr


@needs_cli
@pytest.mark.claude_cli
def test_verbose_shows_the_agents_turns_on_stderr_as_they_happen(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(
        "turns:\n"
        "  - tool_use: {name: Bash, input: {command: 'echo sk-ant-api03-SHOWN-NOWHERE-0123456789'}}\n"
        "  - text: listed it\n"
    )
    done = ironflow("agent", "-v", "--allowed-tools", "Bash", f"--fake-model={script}", "run it")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "listed it"  # the answer alone on stdout
    lines = done.stderr.splitlines()
    assert '→ Bash command="echo [redacted]"' in lines
    assert any(line.startswith("result (2 turns") for line in lines)
    assert "sk-ant-api03-SHOWN-NOWHERE" not in done.stderr
