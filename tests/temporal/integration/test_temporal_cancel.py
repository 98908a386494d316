"""Cancelling a workflow on the real Temporal dev server removes its running sandbox.

On Kubernetes (the in-process API test server, the real auth proxy): the step's pod is deleted
and its proxy token revoked, as the proxy's own registry shows. On the local sandbox (real
bubblewrap): the sandbox's processes are gone. Either way the workflow ends cancelled, after its
in-flight activity was cancelled and the run released again.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError
from temporalio.worker import Worker
from tests.fakes.local_sandbox import local_sandbox
from tests.temporal.integration.watching import WORKFLOWS, activity_events

from ironflow.auth_proxy import app as proxy_app
from ironflow.auth_proxy import config as proxy_config
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.provider import AgentProvider
from ironflow.secrets import Secret
from ironflow.temporal import build_worker, load_workflows
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually
from ironflow.testing.processes import alive, argv_of, descendants
from ironflow.testing.temporal_server import TemporalDevServer

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).parent
JSON_TEXT = (HERE.parents[1] / "fixtures" / "claude" / "json_text.out").read_text()
ADMIN_KEY = "c" * 40
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


async def cancel_and_wait(handle: WorkflowHandle[object, object]) -> None:
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert isinstance(failed.value.cause, CancelledError)
    assert (await handle.describe()).status is WorkflowExecutionStatus.CANCELED


@pytest.fixture
async def client(temporal_server: TemporalDevServer) -> Client:
    return await Client.connect(temporal_server.address)


def worker(client: Client, queue: str, provider: AgentProvider) -> Worker:
    return build_worker(client, task_queue=queue, provider=provider, workflows=load_workflows(str(WORKFLOWS)))


async def test_cancelling_the_workflow_deletes_the_running_pod_and_revokes_its_token(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-api03-temporal-cancel-test-key-abcdef")  # the worker's credential
    queue = f"cancel-{uuid.uuid4().hex[:8]}"
    async with KubeTestServer() as server:
        server.create_namespace("agents")
        server.script_pods(PodScript(name_prefix="claude-code", run_for=None, log=JSON_TEXT))
        config = proxy_config.AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream="http://127.0.0.1:9")
        async with proxy_app.run_auth_proxy(config) as proxy:
            provider = (
                K8sEphemeralProvider.sandboxed(IMAGE)
                .namespace("agents")
                .timeout(120)
                .cluster(server.cluster_config())
                .auth_proxy(proxy.url)
                .auth_proxy_admin_key(ADMIN_KEY)
            )
            async with provider, worker(client, queue, provider):
                handle = await client.start_workflow(
                    "Linear", {"steps": [{"name": "long", "prompt": "hi"}]}, id="cancel-k8s", task_queue=queue
                )
                pod = await eventually(
                    lambda: next(iter(server.objects(k8s.PODS, "agents")), None), limit_s=30, what="the step's pod"
                )
                assert pod["metadata"]["labels"]["ironflow.io/run-id"] == "cancel-k8s"
                assert proxy.registry.run_grant_ids("cancel-k8s")  # type: ignore[attr-defined]
                await cancel_and_wait(handle)
                assert server.objects(k8s.PODS, "agents") == []
                assert proxy.registry.run_grant_ids("cancel-k8s") == []  # type: ignore[attr-defined]
                assert await proxy.registry.count() == 0
    events = await activity_events(client, "cancel-k8s")
    assert events["EVENT_TYPE_ACTIVITY_TASK_CANCELED"] == 1
    assert events["EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"] == 3  # release, the step, the release after the cancel


@pytest.fixture
def temp() -> Iterator[str]:
    made = tempfile.mkdtemp(prefix="ifl-tx-")
    yield made
    shutil.rmtree(made, ignore_errors=True)


@local_sandbox
async def test_cancelling_the_workflow_kills_the_local_sandbox(client: Client, temp: str) -> None:
    queue = f"cancel-{uuid.uuid4().hex[:8]}"
    provider = LocalSandboxProvider(timeout=120, temp_dir=temp)
    steps = [{"name": "long", "argv": ["sleep", "100"]}]
    before = descendants(os.getpid())  # the dev server's processes
    async with provider, worker(client, queue, provider):
        handle = await client.start_workflow("Linear", {"steps": steps}, id="cancel-local", task_queue=queue)

        def sandbox_running() -> set[int] | None:
            """The new processes once the step's command runs among them: the cancel must find the
            step in flight, not catch whichever process came first (the run's release precedes it)."""
            new = alive(descendants(os.getpid()) - before)
            return new if any(argv_of(pid) == steps[0]["argv"] for pid in new) else None

        sandbox = await eventually(sandbox_running, limit_s=30, what="the step's command running in its sandbox")
        await cancel_and_wait(handle)
        assert alive(sandbox) == set()
    events = await activity_events(client, "cancel-local")
    assert events["EVENT_TYPE_ACTIVITY_TASK_CANCELED"] == 1, events
    assert os.listdir(temp) == []
