"""Spans of a step on a cluster: the sandbox (a pod, a claim) and its stages, children of the step's
span, and the step's ``traceparent`` on its proxy token, seen through the OpenTelemetry SDK's
in-memory exporter. Each test runs on every ``kube`` backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from tests.fakes.kubecase import KubeCase, nothing_left
from tests.fakes.kubelet_problems import PROBLEMS
from tests.fakes.proxy_tokens import MemoryIssuer
from tests.fakes.spans import by_name, finished_spans
from tests.k8s.integration.test_k8s_runtime_steps import proxied

from ironflow import errors, tracing
from ironflow.k8s.commands import execution
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.kube import PodScript
from ironflow.testing.polling import eventually

__all__ = ["finished_spans"]  # the fixture, imported to be found

JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()
RUN = "01a0e906-1f85-7000-8000-0000000000bb"


def one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, f"{name}: {[s.name for s in spans]}"
    return found[0]


async def the_pods_name(kube: KubeCase) -> str:
    async def created() -> str | None:
        pods = (await kube.api.list(k8s.PODS, kube.namespace)).items
        return str(pods[0]["metadata"]["name"]) if pods else None

    name: str = await eventually(created, interval_s=0.02, what="the step's pod")
    return name


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_pod_step_is_a_sandbox_span_with_create_ready_and_run_under_the_step(
    kube: KubeCase, finished_spans: InMemorySpanExporter
) -> None:
    await kube.control.script_pods(PodScript(name_prefix="claude-code", run_for=0.3, log=JSON_TEXT))
    issuer = MemoryIssuer()
    runner = StepRunner.of(proxied(kube.namespace).settings, api=kube.api, worker_env={}, issuer=issuer)
    with tracing.span("ironflow.step", step="s"):
        traceparent = tracing.current_traceparent()
        await runner.run(AgentConfig("hi", trace_context=traceparent).scoped(RUN, "s"))
    spans = finished_spans.get_finished_spans()
    step, sandbox = one(spans, "ironflow.step"), one(spans, "ironflow.sandbox")
    create, ready, run = (one(spans, n) for n in ("ironflow.pod.create", "ironflow.pod.ready", "ironflow.pod.run"))
    assert {s.context.trace_id for s in (step, sandbox, create, ready, run)} == {step.context.trace_id}
    assert parent_of(sandbox) == step.context.span_id
    assert {parent_of(s) for s in (create, ready, run)} == {sandbox.context.span_id}
    attrs = sandbox.attributes or {}
    pod = attrs["ironflow.pod"]
    assert str(pod).startswith("claude-code-")
    assert (attrs["ironflow.backend"], attrs["ironflow.namespace"]) == ("k8s", kube.namespace)
    assert (attrs["ironflow.phase"], attrs["ironflow.exit_code"]) == ("Succeeded", 0)
    assert {(s.attributes or {})["ironflow.pod"] for s in (create, ready, run)} == {pod}
    assert (ready.attributes or {}).get("ironflow.node"), "the ready span names the node"
    ends = [s.end_time or 0 for s in (create, ready)]
    starts = [s.start_time or 0 for s in (ready, run)]
    assert ends[0] <= starts[0], "the pod is waited for once it is created"
    assert ends[1] <= starts[1], "the run starts when the wait for the pod to run ends"
    # The proxy token carries the step's traceparent, so the proxy's request spans join this trace.
    assert issuer.trace_contexts == [traceparent]
    await nothing_left(kube, k8s.PODS)


async def test_a_pod_that_cannot_start_ends_its_spans_with_the_reason(
    kube: KubeCase, finished_spans: InMemorySpanExporter
) -> None:
    problem = next(p for p in PROBLEMS if p.reason == "CreateContainerConfigError")
    runner = StepRunner.of(proxied(kube.namespace).settings, api=kube.api, worker_env={}, issuer=MemoryIssuer())
    task = asyncio.ensure_future(runner.run(AgentConfig("hi").scoped(RUN, "s")))
    try:
        name = await the_pods_name(kube)
        await kube.control.report_problem(kube.namespace, name, problem.reason, problem.message)
        with pytest.raises(errors.SandboxRefused):
            await asyncio.wait_for(task, timeout=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    spans = finished_spans.get_finished_spans()
    assert by_name(spans, "ironflow.pod.run") == [], "the pod never ran"
    for span in (one(spans, "ironflow.sandbox"), one(spans, "ironflow.pod.ready")):
        assert span.status.status_code is StatusCode.ERROR
        assert problem.reason in (span.status.description or ""), span.status.description
    await nothing_left(kube, k8s.PODS)


async def test_a_command_pod_is_a_sandbox_span_too(kube: KubeCase, finished_spans: InMemorySpanExporter) -> None:
    await kube.control.script_pods(PodScript(name_prefix="cmd-", run_for=0.2, log="done\n"))
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cmd-traced", "namespace": kube.namespace},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "cmd-traced", "image": "busybox"}]},
    }
    out = await execution.run_pod(kube.api, body, timeout_s=30)
    assert out.success
    spans = finished_spans.get_finished_spans()
    sandbox = one(spans, "ironflow.sandbox")
    assert (sandbox.attributes or {})["ironflow.pod"] == "cmd-traced"
    for name in ("ironflow.pod.create", "ironflow.pod.ready", "ironflow.pod.run"):
        assert parent_of(one(spans, name)) == sandbox.context.span_id
    await nothing_left(kube, k8s.PODS)
