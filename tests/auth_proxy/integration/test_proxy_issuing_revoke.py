"""The token revocation every backend shares (``auth_proxy.issuing.revoke_run_tokens`` /
``revoke_step_token``), against the real auth proxy: a released run's tokens and a finished
step's token are revoked; a proxy that cannot be reached is a logged warning (the tokens
expire on their own), never an error, and the log names the run, never the admin key."""

from __future__ import annotations

import logging
import time

import pytest

from ironflow.auth_proxy import AdminClient, Credential
from ironflow.auth_proxy import app as proxy_app
from ironflow.auth_proxy import config as proxy_config
from ironflow.auth_proxy.issuing import revoke_run_tokens, revoke_step_token
from ironflow.secrets import Secret, find_leaks
from ironflow.testing.ports import free_port

ADMIN_KEY = "a" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "k" * 20))


async def test_a_runs_tokens_and_a_steps_token_are_revoked_at_the_real_proxy() -> None:
    config = proxy_config.AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream="http://127.0.0.1:9")
    expires = int(time.time()) + 600
    async with proxy_app.run_auth_proxy(config) as running, AdminClient(running.url, ADMIN_KEY) as admin:
        first = await admin.issue("run-a", "plan", expires, credential=CREDENTIAL)
        second = await admin.issue("run-a", "build", expires, credential=CREDENTIAL)
        other = await admin.issue("run-b", "plan", expires, credential=CREDENTIAL)
        await revoke_run_tokens(admin, "run-a")
        assert await admin.revoke(first.id) is False  # already gone
        assert await admin.revoke(second.id) is False
        await revoke_step_token(admin, other.id)
        assert await admin.revoke(other.id) is False
        await revoke_run_tokens(None, "run-a")  # no auth proxy: nothing to do


async def test_an_unreachable_proxy_is_a_warning_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    async with AdminClient(f"http://127.0.0.1:{free_port()}", ADMIN_KEY, timeout_s=2) as admin:
        with caplog.at_level(logging.WARNING, logger="ironflow.auth_proxy.issuing"):
            await revoke_run_tokens(admin, "run-gone")
            await revoke_step_token(admin, "tok_0123456789abcdef")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("could not revoke the proxy tokens of run run-gone (they expire on their own)")
    assert messages[1].startswith("could not revoke proxy token tok_01234567 (it expires on its own)")
    assert "tok_0123456789abcdef" not in messages[1]
    assert find_leaks([ADMIN_KEY], messages) == []
