"""``ironflow worker --metrics-port 0 --log-format json`` as a user runs it: a process of its own,
scraped over HTTP while a run is in flight, its stderr one JSON object per line.

The run is an op step held open by a gate file, so no sandbox is needed and "during" is a
state the test controls, not a moment it hopes to catch.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.testing.polling import eventually_sync

WORKFLOWS = Path(__file__).parent / "engine_workflows.py"
IRONFLOW = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]


def queue(store: str, workflow: str, input: Any) -> str:
    result = CliRunner().invoke(app, ["run", f"{WORKFLOWS}:{workflow}", "--input", json.dumps(input), "--store", store])
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310  (a loopback http URL)
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    status, text = get(url)
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


def scrape_until(url: str, check: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until ``check`` holds of what ``/metrics`` shows; that scrape."""

    def passed() -> Samples | None:
        found = scrape(url)
        return found if check(found) else None

    found: Samples = eventually_sync(passed, limit_s=30, what=what)
    return found


class WorkerProcess:
    """``ironflow worker`` with its stderr in a file, so the test reads its lines while it runs."""

    def __init__(self, store: str, log: Path) -> None:
        self.log = log
        argv = [*IRONFLOW, "worker", "--store", store, "--metrics-port", "0", "--log-format", "json"]
        self._log_file = log.open("w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._log_file, stdin=subprocess.DEVNULL)

    def lines(self) -> list[dict[str, Any]]:
        """Every line written so far, parsed (each must be a JSON object)."""
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        self._log_file.close()
        return code


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[WorkerProcess, str]]:
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    process = WorkerProcess(store, tmp_path / "worker.log")
    try:
        yield process, store
    finally:
        if process.proc.poll() is None:
            process.proc.kill()
        process.stop()


def test_curl_metrics_on_a_worker_shows_the_step_counters_moving_during_a_run(
    worker: tuple[WorkerProcess, str], tmp_path: Path
) -> None:
    process, store = worker
    started = eventually_sync(
        lambda: next((line for line in process.lines() if line["event"] == "worker taking runs; Ctrl-C stops"), None),
        limit_s=30,
        what=lambda: f"the worker to start; it wrote {process.log.read_text()!r}",
    )
    metrics_url = started["metrics"]
    health_url = metrics_url.removesuffix("/metrics") + "/healthz"
    op = {"backend": "local", "kind": "op"}
    assert sample(scrape(metrics_url), "ironflow_steps_started_total", **op) is None

    gate = tmp_path / "gate"
    run_id = queue(store, "gated", {"gate": str(gate)})
    during = scrape_until(
        metrics_url, lambda found: sample(found, "ironflow_steps_started_total", **op) == 1, "the gated step to start"
    )
    assert sample(during, "ironflow_steps_finished_total", **op, outcome="succeeded") is None
    assert sample(during, "ironflow_step_duration_seconds_count", **op) is None
    assert get(health_url) == (200, "ok")

    gate.touch()
    succeeded = {"backend": "local", "outcome": "succeeded"}
    after = scrape_until(
        metrics_url, lambda found: sample(found, "ironflow_runs_finished_total", **succeeded) == 1, "the run to finish"
    )
    assert sample(after, "ironflow_steps_finished_total", **op, outcome="succeeded") == 1
    assert sample(after, "ironflow_step_duration_seconds_count", **op) == 1
    assert sample(after, "ironflow_runs_queued") == 0

    assert process.stop() == 0
    lines = process.lines()  # every line of stderr is a JSON object
    by_event = {line["event"]: line for line in lines if line.get("run_id") == run_id}
    assert set(by_event) == {"run started", "step started", "step finished", "run finished"}
    ref = f"{WORKFLOWS}:gated"
    for line in by_event.values():
        assert (line["workflow"], line["backend"], line["attempt"], line["level"]) == (ref, "local", 1, "info")
        assert isinstance(line["ts"], float)
    step = by_event["step finished"]
    assert (step["step"], step["kind"], step["outcome"], step["tries"]) == ("wait for the gate", "op", "succeeded", 1)
    assert step["duration_s"] >= 0
    assert by_event["run finished"]["outcome"] == "succeeded"
    assert lines[-1]["event"] == "worker stopped"
