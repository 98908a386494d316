"""A Claude credential is recognised anywhere in a value and under any case of its variable's
name (issue 19, item 10): the one rule every backend applies before a value enters a sandbox
behind the auth proxy."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from ironflow import secrets
from ironflow.claude import layout


@pytest.mark.parametrize(
    "value",
    ["sk-ant-api03-abc", "Bearer sk-ant-oat01-abc", " sk-ant-x", "SK-ANT-API03-X", "token=sk-ant-1;", "a\nsk-ant-2"],
)
def test_a_credential_anywhere_in_a_value_is_found(value: str) -> None:
    assert secrets.looks_like_claude_credential(value)


@pytest.mark.parametrize("value", ["", "glpat-123", "task-ant-1", "desk-antenna", "sk_ant", "ifap_0123"])
def test_values_without_a_credential_pass(value: str) -> None:
    assert not secrets.looks_like_claude_credential(value)


@pytest.mark.parametrize(
    "name", ["ANTHROPIC_API_KEY", "anthropic_api_key", "Claude_Code_OAuth_Token", "anthropic_base_url"]
)
def test_a_credential_variable_is_withheld_whatever_its_case(name: str) -> None:
    assert layout.withheld_from_proxied_sandbox(name, "harmless")


def test_a_plain_variable_with_a_plain_value_reaches_the_sandbox() -> None:
    assert not layout.withheld_from_proxied_sandbox("GITLAB_TOKEN", "glpat-1")
    assert layout.withheld_from_proxied_sandbox("MY_VAR", "Bearer sk-ant-oat01-1")


@pytest.mark.parametrize("module", [secrets, layout], ids=lambda m: m.__name__)
def test_docstring_examples_hold(module: ModuleType) -> None:
    assert doctest.testmod(module).failed == 0
