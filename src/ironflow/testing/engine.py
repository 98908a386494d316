"""A recording provider for workflow tests: it keeps pretend pods and logs every call in order.

``RecordingProvider`` implements :class:`~ironflow.provider.AgentProvider` without
running anything: ``invoke`` "creates a pod" carrying the step's labels, streams the step's
``output`` lines to the sink, waits ``delay_s``, answers ``done <step>`` (a stream-json result
line to the sink, then the result) and "deletes" the pod; ``release_run`` deletes the
pods whose run or root-run label is the run. Every call is appended to ``events`` and,
with ``log_path``, to a JSON-lines file, so a test can check the order of releases and
invocations across processes (e.g. a worker killed with SIGKILL and the one that resumes).
With a log, ``release_run`` also deletes the pods another process left behind (an
``invoke`` with no end and no earlier release), as a real cluster would still hold them.

Nothing in the library imports this module.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ironflow import errors, labels
from ironflow.provider import LogSink, ProviderBase
from ironflow.results import AgentResult
from ironflow.steps import AgentConfig

__all__ = ["RecordingProvider", "read_events"]


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """The events a provider wrote to ``path``, in order (a torn last line is skipped)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


class RecordingProvider(ProviderBase):
    """A provider that records; ``failures`` maps a step name to errors raised on its next calls,
    ``output`` a step name to the ``(stream, line)`` pairs each call streams first, ``costs`` a step
    name to the ``cost_usd`` its result reports."""

    def __init__(
        self,
        *,
        log_path: str | Path | None = None,
        delay_s: float = 0.0,
        step_delays: Mapping[str, float] | None = None,
        failures: Mapping[str, Sequence[BaseException]] | None = None,
        release_failures: int = 0,
        account_kind: str | None = None,
        output: Mapping[str, Sequence[tuple[str, str]]] | None = None,
        costs: Mapping[str, float] | None = None,
    ) -> None:
        self.log_path = Path(log_path) if log_path is not None else None
        self.delay_s = delay_s
        self.step_delays = dict(step_delays or {})
        self.failures = {k: list(v) for k, v in (failures or {}).items()}
        self.release_failures = release_failures
        self._account_kind = account_kind
        self.output = {k: list(v) for k, v in (output or {}).items()}
        self.costs = dict(costs or {})
        self.events: list[dict[str, Any]] = []
        self.pods: dict[str, dict[str, str]] = {}
        self.configs: list[AgentConfig] = []
        self._counter = 0

    def _record(self, event: str, **fields: Any) -> None:
        entry = {"event": event, "pid": os.getpid(), "t": time.time(), **fields}
        self.events.append(entry)
        if self.log_path is not None:
            with self.log_path.open("a") as f:
                f.write(json.dumps(entry) + "\n")
                f.flush()

    def account_kind(self) -> str | None:
        return self._account_kind

    async def run(self, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
        return await self._invoke(config, logs)

    async def _invoke(self, config: AgentConfig, sink: LogSink | None) -> AgentResult:
        # A pod's labels, as a backend derives them: the step's own, then its scope's.
        pod_labels = {**config.pod_labels, **(config.scope.labels if config.scope else {})}
        step = pod_labels.get(labels.LABEL_STEP, "")
        self._counter += 1
        pod = f"pod-{os.getpid()}-{self._counter}"
        self.configs.append(config)
        self.pods[pod] = pod_labels
        self._record("invoke", pod=pod, step=step, labels=pod_labels, account=config.account.account_id
                     if config.account else None)  # fmt: skip
        try:
            if sink is not None:
                for stream, line in self.output.get(step, ()):
                    sink.log(stream, line)
            await asyncio.sleep(self.step_delays.get(step, self.delay_s))
            pending = self.failures.get(step)
            if pending:
                exc = pending.pop(0)
                self._record("failed", pod=pod, step=step, error=type(exc).__name__)
                raise exc
            if sink is not None:
                sink.log("stdout", json.dumps({"type": "result", "result": f"done {step}"}))
            self._record("finished", pod=pod, step=step)
            return AgentResult(value=f"done {step}", duration_ms=1, model=config.model, cost_usd=self.costs.get(step))
        except asyncio.CancelledError:
            self._record("cancelled", pod=pod, step=step)
            raise
        finally:
            self.pods.pop(pod, None)  # the provider deletes its pod however the step ends

    def _live_pods(self) -> dict[str, dict[str, str]]:
        """Pods still there: in memory, plus (with a log) those other processes left behind."""
        live = dict(self.pods)
        if self.log_path is not None and self.log_path.exists():
            for event in read_events(self.log_path):
                if event["event"] == "invoke":
                    live.setdefault(event["pod"], event["labels"])
                elif event["event"] in ("finished", "cancelled", "failed"):
                    live.pop(event["pod"], None)
                elif event["event"] == "release":
                    for pod in event["deleted"]:
                        live.pop(pod, None)
        return live

    async def release_run(self, run_id: str) -> int:
        if self.release_failures > 0:
            self.release_failures -= 1
            self._record("release_failed", run=run_id)
            raise errors.CleanupError(f"pods of run {run_id} still terminating after 1s")
        gone = sorted(
            name
            for name, pod_labels in self._live_pods().items()
            if run_id in (pod_labels.get(labels.LABEL_RUN_ID), pod_labels.get(labels.LABEL_ROOT_RUN_ID))
        )
        for name in gone:
            self.pods.pop(name, None)
        self._record("release", run=run_id, deleted=gone)
        return len(gone)
