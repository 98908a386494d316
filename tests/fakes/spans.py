"""An OpenTelemetry SDK tracer provider that keeps finished spans in memory, for one test.

OpenTelemetry lets a process set its global tracer provider once; a test swaps the global
in and out instead (``monkeypatch`` restores it), as the SDK's own test utilities do.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["by_name", "finished_spans"]


@pytest.fixture
def finished_spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The exporter of a fresh global tracer provider; ``get_finished_spans()`` lists the ended spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield exporter
    provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    """The spans called ``name``, in the order they ended."""
    return [s for s in spans if s.name == name]
