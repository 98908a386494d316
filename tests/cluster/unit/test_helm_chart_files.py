"""``deploy/helm/ironflow`` is exactly what ``ironflow.cluster.helm_chart`` generates (regenerate with
scripts/render-examples), and its template files together hold every object the renderer makes,
in the renderer's order, for every combination of the chart's switches."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import yaml

from ironflow.cluster import documents, helm_chart, sandbox_router, setup, workloads

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
        sandbox_router=sandbox_router.SandboxRouterDeployment(),
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


_IF = re.compile(r"\{\{- if (not )?\.Values\.([\w.]+) \}\}")
_EXPR = re.compile(r"\{\{ \.Values\.([\w.]+)( \| quote)? \}\}")


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.split("."):
        node = node[key]
    return node


def _evaluate(text: str, values: dict[str, Any]) -> str:
    """The little of Go's templates the generator writes: if/if not/else/end lines and value expressions."""
    out, stack = [], [True]
    for line in text.splitlines():
        if match := _IF.fullmatch(line):
            stack.append(stack[-1] and bool(_lookup(values, match.group(2))) != bool(match.group(1)))
        elif line == "{{- else }}":
            taken = stack.pop()
            stack.append(stack[-1] and not taken)
        elif line == "{{- end }}":
            stack.pop()
        elif stack[-1]:
            out.append(_EXPR.sub(lambda m: _render(_lookup(values, m.group(1)), quote=bool(m.group(2))), line))
    assert stack == [True], "unbalanced if/end"
    return "\n".join(out) + "\n"


def _render(value: Any, *, quote: bool) -> str:
    return json.dumps(str(value)) if quote else str(value)


def test_the_templates_evaluate_to_the_rendered_set_for_every_switch_combination() -> None:
    """Every if/else the generator wrote, under all 256 combinations (helm itself runs a sample)."""
    templates = "".join(text for path, text in FILES if path.startswith("templates/"))
    base = setup.ClusterSetup(
        auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL,
        auth_proxy_deployment=workloads.AuthProxyDeployment(),
        worker_deployment=workloads.WorkerDeployment(),
        sandbox_router=sandbox_router.SandboxRouterDeployment(),
    )
    for combination in itertools.product((True, False), repeat=len(helm_chart.SWITCHES)):
        values, config = helm_chart.default_values(), base
        for switch, on in zip(helm_chart.SWITCHES, combination, strict=True):
            *parents, leaf = switch.path.split(".")
            (_lookup(values, ".".join(parents)) if parents else values)[leaf] = on
            config = switch.apply(config, on)
        rendered = [d for d in yaml.safe_load_all(_evaluate(templates, values)) if d is not None]
        assert rendered == setup.render(config), combination
