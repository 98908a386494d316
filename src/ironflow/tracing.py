"""OpenTelemetry spans for run → step → sandbox → proxy request, or nothing without OpenTelemetry.

``opentelemetry-api`` is optional (the ``otel`` extra): without it :data:`ENABLED` is false and
:func:`span` yields a shared do-nothing handle. With it, spans go to the tracer ``ironflow`` of
the global tracer provider; ironflow never sets a provider or an exporter, so with the API
alone (no provider set) no span is made at all (:func:`recording`). The process that runs
ironflow configures export (the OpenTelemetry SDK with its ``OTEL_*`` environment variables,
an OTLP exporter, ``opentelemetry-instrument``). Links between processes are W3C
``traceparent`` strings: a step hands its own to the agent and to the auth proxy's token,
which parents the proxy's requests.

Attribute keys are the keyword names under ``ironflow.`` (``run_id`` → ``ironflow.run_id``);
values are never secrets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: every span is the no-op handle
    ENABLED = False
else:
    ENABLED = True
    _W3C = TraceContextTextMapPropagator()
    _NO_PROVIDER = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)

__all__ = ["ENABLED", "Span", "context_from", "current_traceparent", "recording", "span"]

Attribute = str | int | float | bool | None


def _attributes(values: dict[str, Attribute]) -> dict[str, str | int | float | bool]:
    """The ``ironflow.``-prefixed attributes; a None is left out (OpenTelemetry refuses it)."""
    return {f"ironflow.{key}": value for key, value in values.items() if value is not None}


class Span:
    """A started span, to add what is known only at its end (an exit code, a status)."""

    __slots__ = ("_span",)

    def __init__(self, otel_span: Any) -> None:
        self._span = otel_span

    def set(self, **attributes: Attribute) -> None:
        if self._span is not None:
            self._span.set_attributes(_attributes(attributes))


_NOOP = Span(None)
#: What :func:`span` returns without OpenTelemetry: one shared, reusable block.
_NOOP_BLOCK = contextlib.nullcontext(_NOOP)


def context_from(traceparent: str | None) -> Context | None:
    """The OpenTelemetry context a W3C ``traceparent`` names, or None (none given, or no OpenTelemetry)."""
    if not ENABLED or not traceparent:
        return None
    return _W3C.extract({"traceparent": traceparent})


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when no span is being recorded."""
    if not ENABLED:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent")


def recording() -> bool:
    """Whether spans are made: OpenTelemetry is installed and a tracer provider is set (by the
    SDK, ``OTEL_PYTHON_TRACER_PROVIDER`` or ``opentelemetry-instrument``). Under the API's
    default provider every span would be a no-op that still costs about 15 µs to make, a
    tenth of what the auth proxy spends on a relayed request; none of ironflow's callers reads
    a context from a no-op span (the steps pass ``trace_context`` values), so none is made."""
    return ENABLED and not isinstance(trace.get_tracer_provider(), _NO_PROVIDER)


def span(name: str, *, parent: str | None = None, **attributes: Attribute) -> contextlib.AbstractContextManager[Span]:
    """A span named ``name``, current inside the block; a child of ``parent`` (a ``traceparent``)
    when given, else of the current span. An exception leaving the block is recorded on it."""
    if not recording():
        return _NOOP_BLOCK
    return _recorded_span(name, parent, attributes)


@contextlib.contextmanager
def _recorded_span(name: str, parent: str | None, attributes: dict[str, Attribute]) -> Iterator[Span]:
    tracer = trace.get_tracer("ironflow")
    with tracer.start_as_current_span(name, context=context_from(parent), attributes=_attributes(attributes)) as s:
        yield Span(s)
