"""Costs in ``-o json`` and ``-o yaml`` are rounded to 6 significant digits (issue 31: ``ironflow
agent -o json`` printed ``cost_usd: 7.000000000000001e-05``), at any depth, other numbers untouched."""

from __future__ import annotations

import doctest
import json

import yaml

from ironflow.cli import formats
from ironflow.cli.formats import OutputFormat, ResultFormat, document

NOISY = {
    "cost_usd": 7.000000000000001e-05,
    "duration_ms": 201,
    "created_at": 1733212345.123456,
    "steps": [{"result": {"cost_usd": 0.1 + 0.2, "value": 0.1 + 0.2}}, {"result": {"cost_usd": None}}],
}


def test_a_cost_in_json_is_rounded_and_nothing_else_is() -> None:
    text = document(NOISY, ResultFormat.JSON)
    assert '"cost_usd": 7e-05,' in text
    assert json.loads(text) == {
        "cost_usd": 7e-05,
        "duration_ms": 201,
        "created_at": 1733212345.123456,
        "steps": [{"result": {"cost_usd": 0.3, "value": 0.1 + 0.2}}, {"result": {"cost_usd": None}}],
    }


def test_a_cost_in_yaml_is_the_jsons() -> None:
    text = document(NOISY, OutputFormat.YAML)
    assert text.startswith("cost_usd: 7.0e-05\n")
    assert yaml.safe_load(text) == json.loads(document(NOISY, OutputFormat.JSON))


def test_a_cost_keeps_six_significant_digits() -> None:
    assert json.loads(document({"cost_usd": 12.3456789}, OutputFormat.JSON)) == {"cost_usd": 12.3457}
    assert json.loads(document({"cost_usd": 0}, OutputFormat.JSON)) == {"cost_usd": 0}


def test_the_formats_docstring_examples_run() -> None:
    result = doctest.testmod(formats)
    assert result.attempted > 0
    assert result.failed == 0
