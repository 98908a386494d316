"""Claude Code's conversations kept on agent-sandbox: the conversations claim (the provider file's
``sandbox.sessions_claim``) at ``~/.claude/projects`` rendered and mounted by the template,
``--continue`` / ``--resume`` on the step's command line, and a clear refusal where no
conversations are kept (library and ``ironflow agent``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ironflow import errors
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.claude import command, layout
from ironflow.cli.app import app
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig

POD = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:1").namespace("agents")
KEPT = AgentSandboxProvider(POD.conversations_volume("claude-sessions")).settings


def test_continue_session_runs_claude_with_continue() -> None:
    """Before: AgentConfig had no way to say ``--continue``."""
    args = command.build_args(AgentConfig("and now?", continue_session=True), allow_bypass=False)
    assert args[-1] == "--continue"
    assert "--resume" not in args


def test_continue_session_with_a_session_id_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="continue_session carries on the latest conversation"):
        AgentConfig("hi", continue_session=True, resume_session_id="abc")
    with pytest.raises(errors.ConfigError, match="step setting 'continue_session' must be true or false"):
        AgentConfig.from_dict({"prompt": "hi", "continue_session": "yes"})


def test_continue_session_survives_a_round_trip() -> None:
    config = AgentConfig("hi", continue_session=True)
    assert config.to_dict() == {"prompt": "hi", "continue_session": True}
    assert AgentConfig.from_dict(config.to_dict()) == config


def test_the_template_renders_the_sessions_claim_and_mounts_it_at_claudes_projects() -> None:
    objects = sandbox_steps.template_objects(KEPT)
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "SandboxTemplate", "SandboxWarmPool"]
    assert objects[0]["metadata"]["name"] == "claude-sessions"
    spec: dict[str, Any] = objects[1]["spec"]["podTemplate"]["spec"]
    (volume,) = (v for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert volume["persistentVolumeClaim"]["claimName"] == "claude-sessions"
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts[volume["name"]] == layout.CONVERSATIONS_MOUNT_PATH == "/home/claude/.claude/projects"


@pytest.mark.parametrize(
    ("config", "flag"),
    [
        (AgentConfig("and now?", continue_session=True), ["--continue"]),
        (AgentConfig("x", resume_session_id="s1"), ["--resume", "s1"]),
    ],
)
def test_a_later_claim_continues_the_conversation(config: AgentConfig, flag: list[str]) -> None:
    sandbox_steps.check_step(KEPT, config)
    agent = sandbox_steps.exec_plan(KEPT, config).agent[-1]
    assert " ".join(f"'{f}'" for f in flag) in agent


@pytest.mark.parametrize("config", [AgentConfig("x", continue_session=True), AgentConfig("x", resume_session_id="s1")])
def test_without_a_sessions_claim_continuing_is_refused_before_anything_exists(config: AgentConfig) -> None:
    with pytest.raises(errors.StepConfigError, match=r"needs the conversations volume: set sandbox\.sessions_claim"):
        sandbox_steps.check_step(AgentSandboxProvider(POD).settings, config)


def _agent(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["agent", *args], env={"ANTHROPIC_API_KEY": "sk-ant-api03-" + "x" * 20})
    return result.exit_code, result.stderr


def _assert_refused(code: int, err: str, words: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ")
    assert err.count("\n") == 1, err
    assert words in err


def test_cli_continue_on_the_local_backend_is_refused(tmp_path: Path) -> None:
    _assert_refused(*_agent("--continue", "hi"), "--continue and --resume need Claude Code's conversations kept")
    _assert_refused(
        *_agent("--fake-model", "--resume", "s1", "hi"), "--continue and --resume need Claude Code's conversations"
    )


def test_cli_continue_with_resume_is_refused() -> None:
    _assert_refused(*_agent("--continue", "--resume", "s1", "hi"), "cannot be combined")


@pytest.mark.parametrize("backend", ["k8s", "agent-sandbox"])
def test_cli_continue_without_a_sessions_claim_is_refused(tmp_path: Path, backend: str) -> None:
    pod = "image: ghcr.io/acme/runner:1\nsandboxed: true\n"
    path = tmp_path / "provider.yaml"
    path.write_text(pod if backend == "k8s" else "pod:\n" + "".join(f"  {line}\n" for line in pod.splitlines()))
    code, err = _agent("--backend", backend, "--provider", str(path), "--continue", "hi")
    _assert_refused(code, err, "sandbox.sessions_claim")
