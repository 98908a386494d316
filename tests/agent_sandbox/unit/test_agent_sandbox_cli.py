"""``ironflow sandbox render`` and ``apply-template --dry-run``: objects on stdout; bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.fakes.sandbox_cli import run_sandbox

from ironflow.agent_sandbox import apply, catalog, schemas

PROVIDER = """
image: ghcr.io/acme/claude-runner:2.1.332-1
sandboxed: true
namespace: agents
runtime_class: gvisor
egress_profile: anthropic-only
"""


@pytest.mark.parametrize("pattern", list(catalog.PATTERNS))
def test_render_prints_yaml_documents_for_every_pattern(pattern: str) -> None:
    code, out, err = run_sandbox("render", pattern, "--egress", "10.10.10.100/32:5432")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith(("agents.x-k8s.io", "extensions.agents.x-k8s.io")):
            assert schemas.schema_problems(doc) == []


def test_render_json_uses_the_provider_file_and_version(tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text(PROVIDER)
    code, out, _ = run_sandbox(
        "render", "warm-pool", "--provider", str(path), "--api-version", "v1alpha1", "-o", "json"
    )
    assert code == 0
    template, _pool, claim = json.loads(out)
    assert template["apiVersion"] == "extensions.agents.x-k8s.io/v1alpha1"
    assert template["metadata"]["namespace"] == "agents"
    assert template["spec"]["podTemplate"]["spec"]["runtimeClassName"] == "gvisor"
    assert claim["spec"]["sandboxTemplateRef"] == {"name": "claude-agent"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["render", "nope"], "unknown pattern 'nope'; known: ephemeral"),
        (["render", "ephemral"], "error: unknown pattern 'ephemral'; did you mean 'ephemeral'?\n"),
        (["render", "ephemeral", "--api-version", "v2"], "invalid --api-version 'v2'"),
        (["render", "ephemeral", "-n", "Bad_NS"], "invalid namespace 'Bad_NS'"),
        (["render", "network-custom-egress", "--egress", "10.0.0.1"], "invalid --egress '10.0.0.1'"),
        (["render", "network-custom-egress", "--egress", "10.0.0.1/32:70000"], "port must be 1-65535"),
        (["render", "network-custom-egress"], "needs at least one --egress"),
        (
            ["render", "network-custom-egress", "--egress", "0.0.0.0/0", "--egress-except", "10.0.0.0/8:80"],
            "invalid --egress-except '10.0.0.0/8:80'",
        ),
        (["render", "ephemeral", "--name", "Bad_Name"], "not a valid DNS subdomain"),
        (["render", "warm-pool", "--replicas", "-1"], "invalid --replicas -1"),
        (["apply-template", "--template", "Bad"], "not a valid DNS subdomain"),
        (["apply-template", "--pool", "default", "--dry-run"], "SandboxWarmPool name 'default'"),
        (["apply-template", "--template", "none", "--dry-run"], "SandboxWarmPool name 'none'"),
        (
            ["apply-template", "--kubeconfig", "/nonexistent/kubeconfig"],
            "kubeconfig file '/nonexistent/kubeconfig' does not exist",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    code, out, err = run_sandbox(*args)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_unsandboxed_provider_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text("image: img\n")
    code, _, err = run_sandbox("apply-template", "--provider", str(path), "--dry-run")
    assert code == 2
    assert "must set 'sandboxed: true'" in err


def test_apply_template_dry_run_prints_template_and_pool(tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    path.write_text(PROVIDER)
    code, out, _ = run_sandbox(
        "apply-template", "--provider", str(path), "--pool", "hot", "--replicas", "4", "--dry-run"
    )
    assert code == 0
    template, pool = yaml.safe_load_all(out)
    assert (template["kind"], pool["kind"]) == ("SandboxTemplate", "SandboxWarmPool")
    assert pool["metadata"] == {
        "name": "hot",
        "namespace": "agents",
        "labels": {"app.kubernetes.io/managed-by": "ironflow"},
    }
    assert pool["spec"]["replicas"] == 4


def test_merge_patch_removes_dropped_fields_and_keeps_foreign_labels() -> None:
    current = {
        "metadata": {"labels": {"a": "1", "agents.x-k8s.io/sandbox-template-ref-hash": "x"}},
        "spec": {"replicas": 1, "updateStrategy": {"type": "Recreate"}},
        "status": {"replicas": 1},
    }
    desired = {"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 2}}
    assert apply.merge_patch_to(current, desired) == {"spec": {"replicas": 2, "updateStrategy": None}}
    assert apply.merge_patch_to(desired, desired) == {}


def test_apply_template_reads_agent_sandbox_settings_and_warns_about_the_proxy(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(
        "pod:\n  image: img\n  sandboxed: true\n  namespace: agents\n  auth_proxy: http://auth-proxy:8080\n"
        "template: claude\nreplicas: 2\n"
    )
    code, out, err = run_sandbox("apply-template", "--provider", str(path), "--dry-run", "-o", "json")
    assert code == 0
    template, pool = json.loads(out)
    assert template["metadata"]["name"] == "claude"
    assert pool["spec"]["replicas"] == 2
    assert err.startswith("warning: the controller's default NetworkPolicy")
    code, out, _ = run_sandbox("apply-template", "--provider", str(path), "--dry-run", "--replicas", "5", "-n", "other")
    _, pool = yaml.safe_load_all(out)
    assert (pool["metadata"]["namespace"], pool["spec"]["replicas"]) == ("other", 5)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)
_spec = st.dictionaries(st.text(max_size=4), _json, max_size=5)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _no_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    return value


@settings(max_examples=60)
@given(_spec, _spec)
def test_merge_patch_applied_to_the_stored_spec_gives_the_desired_spec(current: Any, desired: Any) -> None:
    """Null values cannot be sent in a merge patch, so desired specs carry none (as rendered ones)."""
    desired = _no_nulls(desired)
    patch = apply.merge_patch_to({"spec": current}, {"spec": desired})
    assert _merge(current, patch.get("spec", {})) == desired
