"""Provider Accounts on Temporal: the engine's account pool over a shared store (SQLite file or
PostgreSQL, as several workers would share it) attaches an account to each agent step, and a step
whose every account is in a rejected window waits for the reset on a Temporal timer, then runs,
instead of failing."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from tests.fakes.local_sandbox import local_sandbox
from tests.temporal.integration.test_temporal_example import IRONFLOW, cli_worker
from tests.temporal.integration.watching import WORKFLOWS, scheduled

from ironflow.cli import backends
from ironflow.engine import model
from ironflow.engine.accounts import AccountPool, CredentialRef, ProviderAccount
from ironflow.engine.store import Store, open_store
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, ProviderBase
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig
from ironflow.temporal import IronflowActivities, build_worker, load_workflows
from ironflow.testing.polling import eventually
from ironflow.testing.temporal_server import TemporalDevServer

pytestmark = pytest.mark.timeout(120)


class AccountProvider(ProviderBase):
    """Takes Provider Accounts; records the account each step ran with."""

    def __init__(self) -> None:
        self.accounts: list[str | None] = []
        self.ran_at: list[float] = []

    async def run(self, config: AgentConfig, *, logs: object = None) -> AgentResult:
        self.accounts.append(config.account.account_id if config.account is not None else None)
        self.ran_at.append(time.time())
        return AgentResult(value="ran", duration_ms=1)

    async def release_run(self, run_id: str) -> int:
        return 0

    def account_kind(self) -> str | None:
        return ACCOUNT_KIND_CLAUDE_SUBSCRIPTION


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[Store]:
    store = open_store(url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def test_a_rate_limited_step_waits_for_the_window_on_a_timer_then_runs_with_the_account(
    temporal_server: TemporalDevServer, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IFT_MAIN_TOKEN", "sk-ant-oat01-temporal-accounts-test-token")
    provider = AccountProvider()
    client = await Client.connect(temporal_server.address)
    queue = f"accounts-{uuid.uuid4().hex[:8]}"
    steps = [{"name": "plan", "prompt": "plan it"}]
    async with opened(store_url) as store:
        pool = AccountPool(store, [ProviderAccount("main", CredentialRef(env="IFT_MAIN_TOKEN"))], max_wait_s=0)
        activities = IronflowActivities(provider, accounts=pool)
        workflows = load_workflows(str(WORKFLOWS))
        async with build_worker(
            client, task_queue=queue, provider=provider, workflows=workflows, activities=activities
        ):
            resets_at = time.time() + 3  # from now: the worker polls already
            rejected = model.RateWindow("main", "five_hour", model.WindowStatus.REJECTED, resets_at=resets_at)
            await store.record_rate_limits([rejected])
            output = await client.execute_workflow("Linear", {"steps": steps}, id="accounts-1", task_queue=queue)
    assert output == ["ran"]
    assert provider.accounts == ["main"]  # it ran once, after the window, with the account
    assert provider.ran_at[0] >= resets_at
    history = await client.get_workflow_handle("accounts-1").fetch_history()
    timers = [
        e.timer_started_event_attributes for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert len(timers) == 1
    assert 0 < timers[0].start_to_fire_timeout.ToTimedelta().total_seconds() <= 3
    assert await scheduled(client, "accounts-1") == {"ironflow.release_run": 1, "ironflow.agent": 2}


@local_sandbox
async def test_the_cli_worker_s_accounts_share_their_windows_through_the_store(
    temporal_server: TemporalDevServer, tmp_path: Path
) -> None:
    """``ironflow temporal-worker --account … --store …``: the window another worker recorded in the
    store holds the step back (a timer) until it resets; then the step runs, on the local sandbox."""
    store_url = f"sqlite:///{tmp_path / 'engine.db'}"
    queue = f"accounts-{uuid.uuid4().hex[:8]}"
    stderr = tmp_path / "worker.err"
    argv = [
        *IRONFLOW, "temporal-worker", "--task-queue", queue, "--address", temporal_server.address,
        "--workflows", str(WORKFLOWS), "--fake-model",
        "--store", store_url, "--account", "main=env:IFT_KEY,kind=api_key",
    ]  # fmt: skip
    env = {**os.environ, "IFT_KEY": backends.FAKE_MODEL_KEY}  # the offline model admits only its own key
    client = await Client.connect(temporal_server.address)
    async with opened(store_url) as store:
        with cli_worker(argv, stderr, env=env):
            await eventually(lambda: b"task queue " in stderr.read_bytes(), limit_s=30, what=stderr.read_text)
            rejected = model.RateWindow("main", "five_hour", model.WindowStatus.REJECTED, resets_at=time.time() + 3)
            await store.record_rate_limits([rejected])
            output = await client.execute_workflow(
                "Linear", {"steps": [{"name": "plan", "prompt": "plan it"}]}, id="accounts-cli", task_queue=queue
            )
    assert output == [backends.BUILTIN_RUN_REPLY], stderr.read_text()
    history = await client.get_workflow_handle("accounts-cli").fetch_history()
    assert [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED], stderr.read_text()
