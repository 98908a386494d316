"""``OfflineProvider``: the local sandbox with the offline model server in place of the API, for
scripts (``ironflow.run_sync``) and the CLI's ``--fake-model``: one server for its steps, gone at ``aclose``."""

from __future__ import annotations

import asyncio

import pytest
from tests.fakes.local_sandbox import local_sandbox

import ironflow
from ironflow.fake_model import Script
from ironflow.local import OfflineProvider


def test_it_brings_its_own_credential() -> None:
    with pytest.raises(TypeError, match="brings its own credential"):
        OfflineProvider(credential=None)


@local_sandbox
@pytest.mark.timeout(300)
async def test_concurrent_steps_share_one_server_that_stops_at_aclose() -> None:
    provider = OfflineProvider(Script.of(default="scripted answer"))
    async with provider:
        first, second = await asyncio.gather(
            provider.run(ironflow.AgentConfig("one")), provider.run(ironflow.AgentConfig("two"))
        )
        credential = provider.credential
        assert credential is not None
    assert (first.text, second.text) == ("scripted answer", "scripted answer")
    assert provider.credential is None
    host, port = credential.upstream.removeprefix("http://").rstrip("/").rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):  # the server went with the provider
        await asyncio.open_connection(host, int(port))


@local_sandbox
@pytest.mark.timeout(300)
def test_run_sync_runs_a_step_from_code_without_a_loop() -> None:
    """What the README's script does."""
    result = ironflow.run_sync(OfflineProvider(), ironflow.AgentConfig("Say hello"))
    assert result.text == "Hello from the sandbox! (offline fake model)"
