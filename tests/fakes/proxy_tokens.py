"""Token issuers for tests, one per kind, each keeping every call: :class:`MemoryIssuer` issues
numbered tokens with no proxy; :class:`RecordingIssuer` is the real admin client of a real proxy.
Also the real proxy itself, and whether it refuses a token now."""

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

__all__ = ["ADMIN_KEY", "MemoryIssuer", "RecordingIssuer", "dropped", "real_proxy", "refused"]

ADMIN_KEY = "a" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "k" * 20))


class MemoryIssuer:
    """Issues numbered tokens (``tok-000000000001``, ``ifap_secret_value_1``) with no proxy behind
    them, and keeps what each call asked. ``refuse``: every issue raises it (a proxy that is down,
    or refuses for good); ``slow_revoke``: a revoke waits for it, so a cancel can land mid-revoke;
    ``notes``: a token's kept egress decisions by id (``slow_notes``: their read waits for it)."""

    def __init__(
        self,
        *,
        refuse: Exception | None = None,
        slow_revoke: asyncio.Event | None = None,
        slow_notes: asyncio.Event | None = None,
    ) -> None:
        self.refuse, self.slow_revoke, self.slow_notes = refuse, slow_revoke, slow_notes
        self.notes: dict[str, list[str]] = {}
        #: Each notes read: the token's id, and whether it was still live then.
        self.notes_read: list[tuple[str, bool]] = []
        self.issued: list[tuple[str, str, int]] = []
        self.tokens: list[str] = []
        self.trace_contexts: list[str | None] = []
        self.egress: list[Any] = []
        self.credentials: list[Any] = []
        self.live: set[str] = set()
        self.revoked: list[str] = []
        self.runs_revoked: list[str] = []
        self.revoking = asyncio.Event()

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
        if self.refuse is not None:
            raise self.refuse
        self.issued.append((run_id, step, expires_at))
        self.trace_contexts.append(trace_context)
        self.egress.append(egress)
        self.credentials.append(credential)
        token_id, token = f"tok-{len(self.issued):012d}", f"ifap_secret_value_{len(self.issued)}"
        self.tokens.append(token)
        self.live.add(token_id)
        return token_id, Secret(token)

    async def egress_notes(self, token_id: str) -> list[str]:
        self.notes_read.append((token_id, token_id in self.live))
        if self.slow_notes is not None:
            await self.slow_notes.wait()
        return list(self.notes.get(token_id, ()))

    async def revoke(self, token_id: str) -> bool:
        self.revoking.set()
        if self.slow_revoke is not None:
            await self.slow_revoke.wait()
        self.revoked.append(token_id)
        self.live.discard(token_id)
        return True

    async def revoke_run(self, run_id: str) -> int:
        self.runs_revoked.append(run_id)
        return 1


class RecordingIssuer:
    """The real admin client of a real proxy, keeping each grant it was asked for and each token it
    was given. ``credential``: what a grant that names none gets (None: none, as the caller asked);
    ``hold_s`` delays the answer to the step."""

    def __init__(self, admin: AdminClient, *, hold_s: float = 0, credential: Credential | None = CREDENTIAL) -> None:
        self.admin, self.hold_s, self.credential = admin, hold_s, credential
        self.tokens: list[Secret] = []
        self.issued: list[tuple[str, Secret]] = []
        self.credentials: list[Any] = []
        self.revoked: list[str] = []

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
        self.credentials.append(credential)
        chosen = credential or self.credential
        issued = await self.admin.issue(run_id, step, expires_at, credential=chosen, trace_context=trace_context)
        self.tokens.append(issued.token)
        self.issued.append((issued.id, issued.token))
        await asyncio.sleep(self.hold_s)  # the proxy made the token; the step, cancelled meanwhile, never hears
        return issued.id, issued.token

    async def revoke(self, token_id: str) -> bool:
        self.revoked.append(token_id)
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
