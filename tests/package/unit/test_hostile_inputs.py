"""Random documents to every settings reader and random argv to the CLI (issue 19, item 11):
a bad input is one line and exit 2, never a traceback, and nothing but the documented exit
codes comes out.

Each reader gets nested YAML-shaped values built around its own known keys (so the fuzz goes
past the first "unknown key"), plus whole YAML texts, deep nesting included. A reader may
accept a document or refuse it with a :class:`~ironflow.errors.UsageError`; anything else (a
``TypeError`` from a comparison, a ``RecursionError``) is a bug. The CLI is driven in-process
over commands that never start a sandbox or a server, with a vocabulary of flags and hostile
values.

The examples are derandomized so CI sees the same inputs every run (a property that found a new
input on some day would be a red CI on that day); explore further with
``pytest tests/package/unit/test_hostile_inputs.py -p no:randomly --hypothesis-seed=N`` after
dropping ``derandomize``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ironflow import errors
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.auth_proxy.config import AuthProxyConfig
from ironflow.cli.app import app
from ironflow.fake_model.script import Script
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig

_K8S_KEYS = [
    "image", "namespace", "timeout_seconds", "env", "pod_labels", "resources", "limits", "requests", "memory",
    "cpu", "sandbox", "auth_proxy", "url", "runtime_class", "tolerations", "node_selector", "volumes",
    "claude_profiles", "presets", "managed_settings", "cluster", "kubeconfig", "context", "environment",
]  # fmt: skip
_SANDBOX_KEYS = [
    "api_version", "template", "pool", "replicas", "namespace", "pod", "network_policy", "ingress", "egress",
]  # fmt: skip
_STEP_KEYS = ["prompt", "model", "max_turns", "max_budget_usd", "allowed_tools", "pod", "secret_env", "inputs", "scope"]
_SCRIPT_KEYS = ["turns", "default", "usage", "text", "tool_use", "error", "input_tokens", "output_tokens", "status"]

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "inf", "-1", "1Gi", "sk-ant-x", "../x", "/etc/claude-code", "a b", "x" * 300]),
)


def _documents(keys: list[str]) -> st.SearchStrategy[Any]:
    key = st.one_of(st.sampled_from(keys), st.text(max_size=8))
    return st.recursive(
        _SCALARS,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=5)),
        max_leaves=20,
    )


def _must_be_usage_error(read: Callable[[Any], object], document: Any) -> None:
    """Accepted, or refused as the caller's mistake: any other exception fails the test."""
    with contextlib.suppress(errors.UsageError):
        read(document)


READERS: dict[str, tuple[Callable[[Any], object], list[str]]] = {
    "k8s provider": (lambda d: K8sEphemeralProvider.from_dict(d), _K8S_KEYS),
    "agent-sandbox provider": (lambda d: AgentSandboxProvider.from_dict(d), _SANDBOX_KEYS + _K8S_KEYS),
    "step": (lambda d: AgentConfig.from_dict(d), _STEP_KEYS),
    "fake-model script": (lambda d: Script.from_dict(d), _SCRIPT_KEYS),
}


@pytest.mark.parametrize("reader", list(READERS))
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_reader_accepts_or_names_the_problem(reader: str, data: st.DataObject) -> None:
    read, keys = READERS[reader]
    document = data.draw(st.dictionaries(st.sampled_from(keys), _documents(keys), max_size=6) | _documents(keys))
    _must_be_usage_error(read, document)


@pytest.mark.parametrize("reader", list(READERS))
def test_a_deeply_nested_document_is_refused_not_a_recursion_error(reader: str) -> None:
    read, keys = READERS[reader]
    deep: Any = "x"
    for _ in range(5000):
        deep = {keys[0]: deep}
    _must_be_usage_error(read, deep)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(sorted(AuthProxyConfig.__dataclass_fields__)), st.text(max_size=10)))
def test_the_proxy_config_from_any_environment_is_read_or_refused(fields: dict[str, str]) -> None:
    env = {f"IRONFLOW_AUTH_PROXY_{name.upper()}": value for name, value in fields.items()}
    _must_be_usage_error(lambda e: AuthProxyConfig.from_env(e), env)


_ARGV_WORDS = [
    "render", "manifests", "sandbox", "runs", "list", "show", "--provider", "--step", "--prompt", "-o", "json",
    "yaml", "table", "-n", "--namespace", "--auth-proxy", "--cilium", "--gvisor", "--store", "--help",
    "--timeout", "inf", "nan", "-1", "0", "--model", "", "ephemeral", "warm-pool", "--image", "x" * 300,
    "\udcff", "--", "-", "--no-such-flag", "PROVIDER", "STEP", "STORE",
]  # fmt: skip


@settings(
    max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(argv=st.lists(st.sampled_from(_ARGV_WORDS), min_size=1, max_size=7), provider=_documents(_K8S_KEYS))
def test_random_argv_exits_with_a_documented_code_and_no_traceback(
    tmp_path: Path, argv: list[str], provider: Any
) -> None:
    files = {"PROVIDER": tmp_path / "provider.yaml", "STEP": tmp_path / "step.yaml"}
    files["PROVIDER"].write_text(yaml.safe_dump(provider, allow_unicode=True))
    files["STEP"].write_text(yaml.safe_dump({"prompt": "hi", "max_turns": provider}, allow_unicode=True))
    store = f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"
    words = [str(files[w]) if w in files else store if w == "STORE" else w for w in argv]
    with contextlib.chdir(tmp_path):  # a bare word taken as a store path must land nowhere but here
        result = CliRunner().invoke(app, words)
    assert result.exit_code in (0, 1, 2, 3), (words, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (words, result.exception)
    assert "Traceback" not in result.output
    assert not (tmp_path / "missing-dir").exists(), "a read-only command created the store's directory"
    made = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("provider.yaml", "step.yaml"))
    assert made == [], f"the command left files in the working directory: {made}"
