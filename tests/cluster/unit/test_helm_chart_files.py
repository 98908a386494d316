"""``deploy/helm/ironflow`` is exactly what ``ironflow.cluster.helm_chart`` generates (regenerate with
scripts/render-examples), and its template files together hold every object the renderer makes,
in the renderer's order, for every combination of the chart's switches."""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from ironflow.cluster import documents, helm_chart, setup, workloads

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "ironflow"
FILES = helm_chart.chart_files()


def test_every_generated_file_is_committed_byte_for_byte() -> None:
    for path, text in FILES:
        assert (CHART / path).read_text(encoding="utf-8") == text, f"{path} differs: run scripts/render-examples"


def test_no_file_of_the_chart_is_written_by_hand() -> None:
    on_disk = {str(p.relative_to(CHART)) for p in CHART.rglob("*") if p.is_file()}
    assert on_disk == {path for path, _ in FILES}


def test_the_template_parts_are_the_rendered_set_for_every_switch_combination() -> None:
    base = setup.ClusterSetup(
        auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL,
        auth_proxy_deployment=workloads.AuthProxyDeployment(),
        worker_deployment=workloads.WorkerDeployment(),
    )
    for combination in itertools.product((True, False), repeat=len(helm_chart.SWITCHES)):
        config = base
        for switch, on in zip(helm_chart.SWITCHES, combination, strict=True):
            config = switch.apply(config, on)
        parts = [d.body for docs in helm_chart.template_parts(config).values() for d in docs]
        assert parts == [d.body for d in setup.render_documents(config)], combination


def test_values_yaml_holds_every_value_and_switch_at_its_default() -> None:
    values = yaml.safe_load(dict(FILES)["values.yaml"])
    assert values == helm_chart.default_values()
    items: list[helm_chart.Value | helm_chart.Switch] = [*helm_chart.VALUES, *helm_chart.SWITCHES]
    for item in items:
        node = values
        for key in item.path.split("."):
            node = node[key]
        assert node == item.default, item.path


def test_no_placeholder_is_left_in_a_template() -> None:
    for path, text in FILES:
        for value in helm_chart.VALUES:
            assert str(value.placeholder) not in text, (path, value.path)


def test_the_chart_text_is_the_documents_format() -> None:
    chart = yaml.safe_load(dict(FILES)["Chart.yaml"])
    assert chart["name"] == helm_chart.CHART_NAME
    assert chart["apiVersion"] == "v2"
    assert dict(FILES)["Chart.yaml"].endswith(documents.dump_yaml(chart))
