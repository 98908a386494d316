"""The worker's metrics: each event moves its counters, labels stay bounded, workers share nothing."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ironflow.engine import events, model
from ironflow.engine.metrics import WorkerMetrics

RUN = events.RunScope("0190c0de-0000-7000-8000-000000000001", "flows.py:review", "k8s", 1)
AGENT, OP = model.StepKind.AGENT, model.StepKind.OP


def _finished(outcome: events.StepOutcome, took: float, usage: events.Usage | None = None) -> events.StepFinished:
    return events.StepFinished(RUN, "plan", AGENT, outcome, took, 1, usage)


def test_steps_are_counted_by_backend_kind_and_outcome_and_their_durations_observed() -> None:
    metrics = WorkerMetrics()
    metrics.observe(events.StepStarted(RUN, "plan", AGENT))
    metrics.observe(events.StepStarted(RUN, "add", OP))
    metrics.observe(_finished(events.StepOutcome.SUCCEEDED, 12.0))
    metrics.observe(_finished(events.StepOutcome.TIMED_OUT, 700.0))
    value = metrics.registry.get_sample_value
    assert value("ironflow_steps_started_total", {"backend": "k8s", "kind": "agent"}) == 1
    assert value("ironflow_steps_started_total", {"backend": "k8s", "kind": "op"}) == 1
    for outcome in ("succeeded", "timed_out"):
        assert value("ironflow_steps_finished_total", {"backend": "k8s", "kind": "agent", "outcome": outcome}) == 1
    labels = {"backend": "k8s", "kind": "agent"}
    assert value("ironflow_step_duration_seconds_count", labels) == 2
    assert value("ironflow_step_duration_seconds_sum", labels) == 712.0
    assert value("ironflow_step_duration_seconds_bucket", {**labels, "le": "30.0"}) == 1
    assert value("ironflow_step_duration_seconds_bucket", {**labels, "le": "1800.0"}) == 2


def test_runs_are_counted_by_outcome() -> None:
    metrics = WorkerMetrics()
    metrics.observe(events.RunStarted(RUN))
    metrics.observe(events.RunFinished(RUN, events.Outcome.REQUEUED, 0.1))
    value = metrics.registry.get_sample_value
    assert value("ironflow_runs_started_total", {"backend": "k8s"}) == 1
    assert value("ironflow_runs_finished_total", {"backend": "k8s", "outcome": "requeued"}) == 1


def test_tokens_and_cost_are_counted_by_model() -> None:
    metrics = WorkerMetrics()
    metrics.observe(_finished(events.StepOutcome.SUCCEEDED, 1.0, events.Usage("claude-opus", 1000, 200, 0.5)))
    metrics.observe(_finished(events.StepOutcome.SUCCEEDED, 1.0, events.Usage("claude-opus", 10, 2, 0.25)))
    value = metrics.registry.get_sample_value
    assert value("ironflow_tokens_total", {"model": "claude-opus", "direction": "input"}) == 1010
    assert value("ironflow_tokens_total", {"model": "claude-opus", "direction": "output"}) == 202
    assert value("ironflow_cost_usd_total", {"model": "claude-opus"}) == 0.75


def test_leases_and_capacity_waits_are_counted_and_the_waiting_gauge_returns_to_zero() -> None:
    metrics = WorkerMetrics()
    metrics.observe(events.LeaseRenewed(RUN))
    metrics.observe(events.LeaseRenewed(RUN))
    metrics.observe(events.LeaseLost(RUN))
    metrics.observe(events.CapacityWaitStarted("plan", "main rejected until …"))
    value = metrics.registry.get_sample_value
    assert value("ironflow_rate_limit_waiting") == 1
    metrics.observe(events.CapacityWaitEnded("plan", 42.5, acquired=True))
    assert (value("ironflow_lease_renewals_total"), value("ironflow_leases_lost_total")) == (2, 1)
    assert (value("ironflow_rate_limit_waits_total"), value("ironflow_rate_limit_wait_seconds_total")) == (1, 42.5)
    assert value("ironflow_rate_limit_waiting") == 0


def test_no_label_holds_a_run_id_a_workflow_or_a_step_name() -> None:
    metrics = WorkerMetrics()
    for event in (
        events.RunStarted(RUN),
        events.StepStarted(RUN, "plan", AGENT),
        _finished(events.StepOutcome.FAILED, 1.0, events.Usage("m", 1, 1, 0.0)),
        events.RunFinished(RUN, events.Outcome.FAILED, 1.0),
    ):
        metrics.observe(event)
    families = list(text_string_to_metric_families(metrics.render().decode()))
    values = {v for f in families for s in f.samples for k, v in s.labels.items() if k != "le"}
    assert values == {"k8s", "agent", "failed", "m", "input", "output"}


def test_two_workers_in_one_process_count_apart() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    first.observe(events.LeaseLost(RUN))
    assert first.registry.get_sample_value("ironflow_leases_lost_total") == 1
    assert second.registry.get_sample_value("ironflow_leases_lost_total") == 0


def test_the_exposition_names_every_family_before_anything_happened() -> None:
    names = {f.name for f in text_string_to_metric_families(WorkerMetrics().render().decode())}
    assert names >= {
        "ironflow_runs_queued", "ironflow_lease_renewals", "ironflow_leases_lost", "ironflow_rate_limit_waits",
        "ironflow_rate_limit_wait_seconds", "ironflow_rate_limit_waiting", "ironflow_steps_started",
        "ironflow_steps_finished", "ironflow_step_duration_seconds", "ironflow_tokens", "ironflow_cost_usd",
        "ironflow_runs_started", "ironflow_runs_finished",
    }  # fmt: skip
