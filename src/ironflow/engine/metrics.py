"""The worker's Prometheus metrics: runs, steps and their durations, the queue, leases, tokens, cost, waits.

:class:`WorkerMetrics` is an :class:`~ironflow.engine.events.Observer`: each event moves its
counters. Each instance owns its own ``CollectorRegistry`` (tests start several workers in one
process), never the global default one. Labels stay bounded — backend, step kind, outcome,
model, token direction — never a run id, a workflow or a step name. The queue depth is a
gauge the HTTP side (:mod:`ironflow.engine.monitoring`) sets from the store before each scrape.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ironflow.engine import events

__all__ = ["DEFAULT_HOST", "STEP_DURATION_BUCKETS", "WorkerMetrics"]

#: Where the pages listen unless told (:mod:`ironflow.engine.monitoring` serves them); here, so
#: the worker command's help names it without importing the HTTP server.
DEFAULT_HOST: Final = "127.0.0.1"

#: From an op step's milliseconds to an agent step's hour.
STEP_DURATION_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class WorkerMetrics:
    """The metric families of one worker's ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry)

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, registry=self.registry)

        self.runs_started = counter("ironflow_runs_started", "Runs this worker began executing.", "backend")
        self.runs_finished = counter(
            "ironflow_runs_finished",
            "Executions of runs that ended, by outcome (succeeded, failed, cancelled, requeued, abandoned).",
            "backend",
            "outcome",
        )
        self.steps_started = counter(
            "ironflow_steps_started", "Steps that began running (replayed ones do not).", "backend", "kind"
        )
        self.steps_finished = counter(
            "ironflow_steps_finished",
            "Steps that ended, by outcome (succeeded, failed, timed_out, rate_limited, cancelled).",
            "backend",
            "kind",
            "outcome",
        )
        self.step_duration = Histogram(
            "ironflow_step_duration_seconds",
            "Time from a step's start to its end, retries included.",
            ["backend", "kind"],
            buckets=STEP_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.runs_queued = gauge("ironflow_runs_queued", "Top-level runs pending in the store, due or in backoff.")
        self.lease_renewals = counter("ironflow_lease_renewals", "Leases this worker extended.")
        self.leases_lost = counter("ironflow_leases_lost", "Runs dropped because another worker holds them now.")
        self.tokens = counter(
            "ironflow_tokens", "Tokens agent steps used, by model and direction (input, output).", "model", "direction"
        )
        self.cost = counter("ironflow_cost_usd", "Dollars agent steps cost, as reported, by model.", "model")
        self.rate_limit_waits = counter(
            "ironflow_rate_limit_waits", "Times a step had to wait for a provider account (all were rejected)."
        )
        self.rate_limit_wait_seconds = counter(
            "ironflow_rate_limit_wait_seconds", "Seconds steps spent waiting for a provider account."
        )
        self.rate_limit_waiting = gauge("ironflow_rate_limit_waiting", "Steps waiting for a provider account now.")

    def observe(self, event: events.Event) -> None:
        """Count ``event`` (an :class:`~ironflow.engine.events.Observer`)."""
        match event:
            case events.RunStarted(run=run):
                self.runs_started.labels(run.backend).inc()
            case events.RunFinished(run=run, outcome=outcome):
                self.runs_finished.labels(run.backend, outcome).inc()
            case events.StepStarted(run=run, kind=kind):
                self.steps_started.labels(run.backend, kind).inc()
            case events.StepFinished():
                self._step_finished(event)
            case events.LeaseRenewed():
                self.lease_renewals.inc()
            case events.LeaseLost():
                self.leases_lost.inc()
            case events.CapacityWaitStarted():
                self.rate_limit_waits.inc()
                self.rate_limit_waiting.inc()
            case events.CapacityWaitEnded(waited_s=waited):
                self.rate_limit_waiting.dec()
                self.rate_limit_wait_seconds.inc(max(waited, 0.0))

    def _step_finished(self, event: events.StepFinished) -> None:
        backend, kind = event.run.backend, event.kind
        self.steps_finished.labels(backend, kind, event.outcome).inc()
        self.step_duration.labels(backend, kind).observe(event.duration_s)
        usage = event.usage
        if usage is not None:
            self.tokens.labels(usage.model, "input").inc(usage.input_tokens)
            self.tokens.labels(usage.model, "output").inc(usage.output_tokens)
            self.cost.labels(usage.model).inc(usage.cost_usd)

    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)
