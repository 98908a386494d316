"""The real Claude Code CLI (pinned) talking to a fake Anthropic API through the auth proxy.

The CLI holds only the opaque ``ifap_`` token, as a pod would; the fake upstream checks
that the real credential arrives (``x-api-key`` for an API key; ``Bearer`` plus the OAuth
beta flag for an OAuth token) and that the opaque token never does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from ironflow.auth_proxy import AuthProxyConfig, Credential, run_auth_proxy
from ironflow.claude.cli import find_claude_cli
from ironflow.errors import ConfigError
from ironflow.fake_model.server import FakeAnthropic, Script, TextTurn
from ironflow.secrets import Secret, find_leaks

pytestmark = pytest.mark.claude_cli

ADMIN = "admin-key-" + "c" * 40


def _cli() -> str:
    try:
        return find_claude_cli()
    except ConfigError as exc:
        pytest.skip(f"Claude Code CLI not installed: {exc}")


async def _run_cli(cli: str, proxy_url: str, token: str, home: Path) -> tuple[int, str, str]:
    scratch = home / ".claude-tmp"  # not /tmp/claude-<uid>, where nothing removes what it leaves
    scratch.mkdir(exist_ok=True)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "CLAUDE_CODE_TMPDIR": str(scratch),
        "ANTHROPIC_BASE_URL": proxy_url,
        "ANTHROPIC_AUTH_TOKEN": token,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    proc = await asyncio.create_subprocess_exec(
        cli, "-p", "Say hello", env=env, cwd=str(home),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, stdout.decode(), stderr.decode()


@pytest.mark.parametrize(
    ("kind", "value"),
    [("oauth_token", "sk-ant-oat01-CLI-OAUTH-REAL"), ("api_key", "sk-ant-api03-CLI-KEY-REAL")],
)
async def test_claude_cli_runs_through_the_proxy_with_only_the_opaque_token(
    kind: str, value: str, tmp_path: Path
) -> None:
    cli = _cli()
    script = Script.of(default=TextTurn("Hello through the ironflow proxy"))
    async with FakeAnthropic(script, required_credential=value) as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=fake.url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
            issued = await admin.issue(
                "run-cli",
                "agent",
                int(time.time()) + 300,
                credential=Credential(kind, Secret(value)),  # type: ignore[arg-type]
            )
            token = issued.token.reveal()
            code, stdout, stderr = await _run_cli(cli, proxy.url, token, tmp_path)
        assert code == 0, stderr[-2000:]
        assert "Hello through the ironflow proxy" in stdout
        messages = fake.message_requests
        assert messages, "the CLI never reached the upstream"
        for request in fake.requests:
            assert not find_leaks([token], dict(request.headers), request.body, request.query)
        first = messages[0]
        if kind == "api_key":
            assert first.header("x-api-key") == value
            assert first.header("authorization") is None
        else:
            assert first.header("authorization") == f"Bearer {value}"
            assert "oauth-2025-04-20" in [f.strip() for f in (first.header("anthropic-beta") or "").split(",")]
            assert first.header("x-api-key") is None


async def test_claude_cli_with_a_revoked_token_gets_401(tmp_path: Path) -> None:
    cli = _cli()
    async with FakeAnthropic() as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=fake.url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
            credential = Credential("api_key", Secret("sk-ant-api03-x"))
            issued = await admin.issue("run-cli", "agent", int(time.time()) + 300, credential=credential)
            await admin.revoke(issued.id)
            code, stdout, stderr = await _run_cli(cli, proxy.url, issued.token.reveal(), tmp_path)
        assert code != 0
        assert "401" in stdout + stderr or "invalid or expired" in stdout + stderr
        assert fake.message_requests == []
