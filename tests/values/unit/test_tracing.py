"""ironflow.tracing: spans on the global tracer provider with OpenTelemetry, nothing without it."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.fakes.spans import by_name, finished_spans

from ironflow import tracing

__all__ = ["finished_spans"]  # the fixture, imported to be found

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_span_nests_in_the_current_one_and_carries_prefixed_attributes(
    finished_spans: InMemorySpanExporter,
) -> None:
    with tracing.span("outer", run_id="r1", backend=None):
        outer_parent = tracing.current_traceparent()
        with tracing.span("inner", attempt=2) as inner:
            inner.set(exit_code=0)
    spans = finished_spans.get_finished_spans()
    (outer,), (inner_span,) = by_name(spans, "outer"), by_name(spans, "inner")
    assert dict(outer.attributes or {}) == {"ironflow.run_id": "r1"}
    assert dict(inner_span.attributes or {}) == {"ironflow.attempt": 2, "ironflow.exit_code": 0}
    assert inner_span.parent is not None
    assert inner_span.parent.span_id == outer.context.span_id
    assert outer_parent is not None
    assert outer_parent.startswith(f"00-{outer.context.trace_id:032x}-{outer.context.span_id:016x}-")


def test_a_span_with_a_traceparent_is_its_child_whatever_is_current(finished_spans: InMemorySpanExporter) -> None:
    with tracing.span("elsewhere"), tracing.span("child", parent=PARENT):
        pass
    (child,) = by_name(finished_spans.get_finished_spans(), "child")
    assert child.parent is not None
    assert (child.context.trace_id, child.parent.span_id) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)


def test_an_exception_leaving_a_span_is_recorded_and_raised(finished_spans: InMemorySpanExporter) -> None:
    with pytest.raises(ValueError, match="boom"), tracing.span("failing"):
        raise ValueError("boom")
    (failing,) = by_name(finished_spans.get_finished_spans(), "failing")
    assert not failing.status.is_ok
    assert [e.name for e in failing.events] == ["exception"]


def test_outside_any_span_there_is_no_traceparent(finished_spans: InMemorySpanExporter) -> None:
    assert tracing.current_traceparent() is None
    assert tracing.context_from(None) is None


def test_without_opentelemetry_a_span_does_nothing_and_there_is_no_context(
    finished_spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "ENABLED", False)
    with tracing.span("ignored", run_id="r1") as span:
        span.set(exit_code=1)
        assert tracing.current_traceparent() is None
        assert tracing.context_from(PARENT) is None
    assert finished_spans.get_finished_spans() == ()


def test_with_the_api_alone_and_no_tracer_provider_set_no_span_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    # The API's default provider would hand out no-op spans that still carry a parent's
    # context; ironflow makes none at all (the auth proxy's relay pays nothing for tracing).
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not tracing.recording()
    with tracing.span("ignored", parent=PARENT) as span:
        span.set(exit_code=0)
        assert tracing.current_traceparent() is None


def test_a_tracer_provider_set_after_import_turns_spans_on(finished_spans: InMemorySpanExporter) -> None:
    assert tracing.recording()
    with tracing.span("seen"):
        assert tracing.current_traceparent() is not None
    assert [s.name for s in finished_spans.get_finished_spans()] == ["seen"]
