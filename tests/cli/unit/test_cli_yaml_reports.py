"""``-o yaml`` prints the very document ``-o json`` prints, on every report command (pure renderers)."""

from __future__ import annotations

import json

import yaml

from ironflow.cli import check, reap
from ironflow.cli.formats import OutputFormat
from ironflow.cluster import checks
from ironflow.k8s import reaper


def test_check_results_as_yaml_are_the_json_list() -> None:
    results = [
        checks.CheckResult("pods-hardened", checks.Outcome.PASS, "every agent pod is hardened"),
        checks.CheckResult("egress", checks.Outcome.SKIPPED, "no agent pod to inspect"),
    ]
    as_yaml = check.render_results(results, "agents", OutputFormat.YAML)
    assert as_yaml.startswith("- check: pods-hardened\n")
    assert yaml.safe_load(as_yaml) == json.loads(check.render_results(results, "agents", OutputFormat.JSON))


def test_reap_report_as_yaml_is_the_json_object() -> None:
    report = reaper.ReapReport(pods_deleted=1, dry_run=True, pods=("ironflow-agent-1",))
    as_yaml = reap.render_report(report, "agents", OutputFormat.YAML)
    assert as_yaml.startswith("namespace: agents\n")
    assert yaml.safe_load(as_yaml) == json.loads(reap.render_report(report, "agents", OutputFormat.JSON))
