"""One trace from run to proxy request: a workflow with one agent step on the local sandbox,
the real Claude Code CLI and the offline model, seen through the OpenTelemetry SDK's in-memory
exporter."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.fakes.local_sandbox import LOCAL_SANDBOX
from tests.fakes.spans import by_name, finished_spans

from ironflow.engine import model
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.worker import Worker
from ironflow.fake_model.server import FakeAnthropic, Script
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret

__all__ = ["finished_spans"]  # the fixture, imported to be found

KEY = "sk-ant-api03-engine-tracing-test-key-abcdef"
WORKFLOWS = Path(__file__).parent / "engine_workflows.py"


pytestmark = LOCAL_SANDBOX


@pytest.fixture
def temp() -> Iterator[str]:
    """A short parent for the run temp dir: the proxy's unix socket lives there."""
    made = tempfile.mkdtemp(prefix="ifl-trace-")
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "engine.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_one_trace_covers_the_run_its_step_the_sandbox_and_the_proxy_requests(
    store: SqliteStore, temp: str, finished_spans: InMemorySpanExporter
) -> None:
    async with FakeAnthropic(Script.of("Hello from the trace"), required_credential=KEY) as fake:
        provider = LocalSandboxProvider(
            timeout=60,
            credential=ProxyCredential(Secret(KEY), "api_key", fake.url),
            env={"CLAUDE_CODE_MAX_RETRIES": "0"},
            temp_dir=temp,
        )
        run = model.RunRecord(
            id=model.new_id(), workflow=f"{WORKFLOWS}:linear", input={"steps": ["a"]}, backend="local"
        )
        await store.create_run(run)
        await Worker(store, lambda _: Runner(store, provider), lease_s=30).run(until_idle=True)
        done = await store.get_run(run.id)
        assert done is not None
        assert done.status is model.RunStatus.SUCCEEDED
    spans = finished_spans.get_finished_spans()
    (run_span,), (step_span,), (sandbox,) = (
        by_name(spans, n) for n in ("ironflow.run", "ironflow.step", "ironflow.sandbox")
    )
    requests = by_name(spans, "ironflow.proxy.request")
    assert requests, "no proxy request span"
    assert {s.context.trace_id for s in spans} == {run_span.context.trace_id}
    assert run_span.parent is None
    assert step_span.parent is not None
    assert step_span.parent.span_id == run_span.context.span_id
    assert sandbox.parent is not None
    assert sandbox.parent.span_id == step_span.context.span_id
    known = {s.context.span_id for s in spans}
    for request in requests:
        assert request.parent is not None
        assert request.parent.span_id in known
    assert dict(run_span.attributes or {}) == {
        "ironflow.run_id": run.id, "ironflow.workflow": run.workflow, "ironflow.backend": "local",
        "ironflow.outcome": "succeeded",
    }  # fmt: skip
    assert dict(step_span.attributes or {}) == {
        "ironflow.step": "a", "ironflow.kind": "agent", "ironflow.position": 0, "ironflow.attempts": 1
    }  # fmt: skip
    assert dict(sandbox.attributes or {}) == {
        "ironflow.isolation": "bwrap", "ironflow.exit_code": 0, "ironflow.timed_out": False
    }  # fmt: skip
    messages = [r for r in requests if (r.attributes or {}).get("ironflow.path") == "/v1/messages"]
    assert messages
    assert (messages[0].attributes or {})["ironflow.status"] == 200
    assert {(r.attributes or {})["ironflow.method"] for r in messages} == {"POST"}
    values = " ".join(str(v) for s in spans for v in (s.attributes or {}).values())
    assert KEY not in values
    assert "ifap_" not in values
