"""Agent steps inside an open local session: the real Claude Code CLI against the offline fake
Anthropic API, in real bubblewrap (and, for the shared workspace, gVisor and Docker: the relay is a
one-shot step's). Two agent steps and a plain command share one workspace, the
session's proxy token works only while it is open, and the Claude credential never enters it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import LOCAL_SANDBOX, SESSION_ISOLATIONS

from ironflow import errors
from ironflow.fake_model.server import FakeAnthropic, Script
from ironflow.local.sandbox import environment
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions
from ironflow.steps import AgentConfig
from ironflow.workspaces import Workspace

pytestmark = [*LOCAL_SANDBOX]

KEY = "sk-ant-api03-session-agent-test-key-0123456789"
SCRIPT = {
    "turns": [
        {"tool_use": {"name": "Edit", "input": {
            "file_path": "/workspace/calc.py", "old_string": "return a - b", "new_string": "return a + b"}}},
        {"text": "fixed add()"},
        {"tool_use": {"name": "Write", "input": {"file_path": "/workspace/NOTES.md", "content": "add() adds\n"}}},
        {"text": "wrote the notes"},
    ]
}  # fmt: skip


def _provider(fake: FakeAnthropic, state: Path, isolation: environment.Isolation = "bwrap") -> LocalSandboxProvider:
    return LocalSandboxProvider(
        isolation=isolation,
        timeout=120,
        credential=ProxyCredential(Secret(KEY), "api_key", fake.url),
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        temp_dir=str(state),
    )


def sessions_dirs(state: Path) -> list[str]:
    """The session directories holding a proxy socket."""
    return [str(p.parent) for p in state.rglob("proxy.sock")]


def _host_view(pids: list[int]) -> bytes:
    """Every environment and command line of the session's processes, as the host sees them."""
    seen = b""
    for pid in pids:
        for part in ("environ", "cmdline"):
            try:
                seen += Path(f"/proc/{pid}/{part}").read_bytes()
            except OSError:
                continue
    return seen


@pytest.mark.parametrize("isolation", SESSION_ISOLATIONS)
async def test_two_agent_steps_and_a_command_share_the_sessions_workspace(
    isolation: environment.Isolation, state: Path, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    async with FakeAnthropic(Script.from_dict(SCRIPT), required_credential=KEY) as fake:
        async with LocalSessions(_provider(fake, state, isolation), state_dir=str(state)) as sessions:
            sandbox = await sessions.open(OpenOptions(workspace=Workspace(str(repo))), agent=True)
            tools = ("Edit", "Write")
            first = await sessions.agent(sandbox.id, AgentConfig("fix add()", allowed_tools=tools))
            assert first.text == "fixed add()"
            seen = await sandbox.commands.run(["sh", "-c", "cat calc.py && echo made > made.txt && env"])
            assert "return a + b" in seen.stdout  # the command sees the first agent's edit
            assert "ifap_" not in seen.stdout  # the proxy token is only in the agent steps' environment
            second = await sessions.agent(sandbox.id, AgentConfig("write notes", allowed_tools=tools))
            assert second.text == "wrote the notes"
            assert (repo / "calc.py").read_text().endswith("a - b\n")  # the host tree is untouched

            # The Claude credential is in no process, environment, argv or file of the session.
            assert KEY.encode() not in _host_view(sessions.host_pids(sandbox.id))
            listed = await sandbox.commands.run(["sh", "-c", "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline; true"])
            assert KEY not in listed.stdout
            grep = await sandbox.commands.run(["grep", "-rl", KEY, "/workspace", "/home/claude", "/tmp"])
            assert grep.exit_code == 1, grep.stdout  # nothing found

            changes = await sessions.changes(sandbox.id)
            assert [(f.path, f.change) for f in changes.files] == [
                ("NOTES.md", "added"),
                ("calc.py", "modified"),
                ("made.txt", "added"),
            ]
            proxies = [Path(d, "proxy.sock") for d in sessions_dirs(state)]
            assert len(proxies) == 1  # the session's own proxy, while it is open
            await sandbox.close()
        assert not any(p.exists() for p in proxies)  # closed with the session: its token is gone
    # Both steps' requests reached the model through the session's proxy, with the real key added there.
    assert len(fake.requests) >= 4


async def test_a_session_without_agent_refuses_an_agent_step(state: Path) -> None:
    async with LocalSessions(LocalSandboxProvider(), state_dir=str(state)) as sessions:
        sandbox = await sessions.open()
        with pytest.raises(errors.ConfigError, match="opened without agent=True"):
            await sessions.agent(sandbox.id, AgentConfig("hi"))
        await sandbox.close()


async def test_a_session_agent_step_ends_at_its_own_timeout_before_the_providers(state: Path) -> None:
    late = Script.from_dict({"turns": [{"text": "late", "delay_s": 60}]})
    async with (
        FakeAnthropic(late, required_credential=KEY) as fake,
        LocalSessions(_provider(fake, state), state_dir=str(state)) as sessions,
    ):
        sandbox = await sessions.open(agent=True)
        started = time.monotonic()
        with pytest.raises(errors.AgentTimeout, match=r"\(the step's timeout\)") as caught:
            await sessions.agent(sandbox.id, AgentConfig("hi").with_timeout(2))
        assert caught.value.bound == "step"
        assert time.monotonic() - started < 60  # the step's 2 s, far short of the provider's 120 s
        await sandbox.close()
