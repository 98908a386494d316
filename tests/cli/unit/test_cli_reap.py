"""``ironflow reap``: interval parsing, report rendering (pure) and bad input (exit 2, one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.cli.reap import OutputFormat, parse_interval, render_report
from ironflow.k8s.reaper import ReapReport


@pytest.mark.parametrize(("text", "seconds"), [("5m", 300), ("30s", 30), ("1h", 3600), ("250ms", 0.25), ("90", 90)])
def test_parse_interval_units(text: str, seconds: float) -> None:
    assert parse_interval(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-1m", "m", "5d"])
def test_parse_interval_refuses_garbage_and_names_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="invalid interval"):
        parse_interval(text)


def test_parse_interval_refuses_zero() -> None:
    with pytest.raises(ValueError, match="orphan reaper interval must be greater than zero"):
        parse_interval("0s")


def test_render_report_json_has_counts_names_and_namespace() -> None:
    report = ReapReport(pods_deleted=1, jobs_deleted=2, pods=("p",), jobs=("a", "b"), warnings=("w",))
    data = json.loads(render_report(report, "agents", OutputFormat.JSON))
    assert data["namespace"] == "agents"
    assert (data["pods_deleted"], data["jobs_deleted"], data["configmaps_deleted"], data["pvcs_deleted"]) == (
        1,
        2,
        0,
        0,
    )
    assert data["jobs"] == ["a", "b"]
    assert data["warnings"] == ["w"]


def test_render_report_table_lists_every_kind_and_says_dry_run() -> None:
    text = render_report(ReapReport(pods_deleted=1, pods=("old-pod",), dry_run=True), "agents", OutputFormat.TABLE)
    for word in ("Job", "Pod", "ConfigMap", "PersistentVolumeClaim", "old-pod", "would delete"):
        assert word in text


def test_reap_refuses_a_bad_namespace_with_exit_2() -> None:
    result = CliRunner().invoke(app, ["reap", "-n", "Bad_NS"])
    assert result.exit_code == 2
    assert "invalid namespace 'Bad_NS'" in result.output


def test_reap_refuses_a_bad_interval_with_exit_2() -> None:
    result = CliRunner().invoke(app, ["reap", "-n", "agents", "--every", "often"])
    assert result.exit_code == 2
    assert "invalid interval 'often'" in result.output


def test_reap_refuses_a_missing_kubeconfig_with_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = CliRunner().invoke(app, ["reap", "-n", "agents", "--kubeconfig", str(missing)])
    assert result.exit_code == 2
    assert "does not exist" in result.output
