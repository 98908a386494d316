"""The local sandbox answering from the offline model server: a step with no key and no network
beyond the in-process proxy (what ``ironflow agent --fake-model`` runs), for scripts, docs and tests.

:func:`offline_model` serves :class:`~ironflow.fake_model.FakeAnthropic` while a block runs and
yields the credential the provider's proxy relays with; :class:`OfflineProvider` is a
:class:`~ironflow.local.LocalSandboxProvider` that starts that server at its first step and stops
it at ``aclose``, so ``ironflow.run_sync(OfflineProvider(), config)`` works from a plain script.
The real Claude Code CLI still runs, inside the real sandbox: only the model is replaced.
The server's module (aiohttp) loads when it starts, so importing this one costs no HTTP stack.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from ironflow.fake_model.script import DEFAULT_REPLY, FAKE_MODEL_KEY, Script
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.provider import LogSink
from ironflow.results import AgentResult
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig

__all__ = ["DEFAULT_REPLY", "FAKE_MODEL_KEY", "OfflineProvider", "offline_model"]


@contextlib.asynccontextmanager
async def offline_model(script: Script) -> AsyncIterator[ProxyCredential]:
    """Serve the offline model server answering ``script`` while the block runs; yield the
    credential a local provider's proxy uses to reach it."""
    from ironflow.fake_model.server import FakeAnthropic  # aiohttp's server: only when it serves

    async with FakeAnthropic(script, required_credential=FAKE_MODEL_KEY) as fake:
        yield ProxyCredential(Secret(FAKE_MODEL_KEY), "api_key", fake.url)


class OfflineProvider(LocalSandboxProvider):
    """A local provider whose model is the offline server answering ``script`` (a reply, or a
    :class:`~ironflow.fake_model.Script`; default :data:`DEFAULT_REPLY`).

    The other options are :class:`LocalSandboxProvider`'s, except ``credential`` (the server's).
    """

    def __init__(self, script: Script | str = DEFAULT_REPLY, **options: Any) -> None:
        if "credential" in options:
            raise TypeError("OfflineProvider brings its own credential (the offline model server's)")
        super().__init__(**options)
        self.script = Script.of(default=script) if isinstance(script, str) else script
        self._server: contextlib.AsyncExitStack | None = None
        self._starting: asyncio.Lock | None = None

    async def run(self, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
        """Start the offline model server if it is not running, then run the step against it."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:  # concurrent first steps start one server
            if self._server is None:
                server = contextlib.AsyncExitStack()
                self.credential = await server.enter_async_context(offline_model(self.script))
                self._server = server
        return await super().run(config, logs=logs)

    async def aclose(self) -> None:
        """Stop the offline model server (a later step starts a new one)."""
        await super().aclose()
        server, self._server, self._starting, self.credential = self._server, None, None, None
        if server is not None:
            await server.aclose()
