"""The real auth proxy for tests of revocation: an issuer that records the tokens it was given
(optionally slow to answer), and whether the proxy refuses a token now."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ironflow.auth_proxy import AdminClient, Credential
from ironflow.auth_proxy import app as proxy_app
from ironflow.auth_proxy import config as proxy_config
from ironflow.secrets import Secret

__all__ = ["ADMIN_KEY", "RecordingIssuer", "dropped", "real_proxy", "refused"]

ADMIN_KEY = "a" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "k" * 20))


class RecordingIssuer:
    """The real admin client, keeping each token it was given; ``hold_s`` delays the answer to the step."""

    def __init__(self, admin: AdminClient, *, hold_s: float = 0) -> None:
        self.admin, self.hold_s = admin, hold_s
        self.tokens: list[Secret] = []

    async def issue(
        self,
        run_id: str,
        step: str,
        expires_at: int,
        *,
        credential: Any = None,
        trace_context: str | None = None,
        egress: Any = None,
    ) -> tuple[str, Secret]:
        issued = await self.admin.issue(run_id, step, expires_at, credential=credential or CREDENTIAL)
        self.tokens.append(issued.token)
        await asyncio.sleep(self.hold_s)  # the proxy made the token; the step, cancelled meanwhile, never hears
        return issued.id, issued.token

    async def revoke(self, token_id: str) -> bool:
        return await self.admin.revoke(token_id)

    async def revoke_run(self, run_id: str) -> int:
        return await self.admin.revoke_run(run_id)


@contextlib.asynccontextmanager
async def real_proxy() -> AsyncIterator[tuple[str, AdminClient]]:
    config = proxy_config.AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream="http://127.0.0.1:9")
    async with proxy_app.run_auth_proxy(config) as running, AdminClient(running.url, ADMIN_KEY) as admin:
        yield running.url, admin


async def refused(proxy_url: str, token: Secret) -> bool:
    """True when the proxy refuses ``token`` (401); a live one is let through (to a dead upstream here)."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{proxy_url}/v1/messages", json=body, headers={"x-api-key": token.reveal()}) as answer,
    ):
        return answer.status == 401


async def dropped(step: asyncio.Task[Any]) -> None:
    """Cancel a running step's task and wait until it has ended (cancelled, not finished)."""
    step.cancel()
    try:
        await step
    except asyncio.CancelledError:
        return
    raise AssertionError("the step ended on its own before it was cancelled")
