"""``sandbox render warm-pool --autoscale MIN:MAX``: the demand scaler's Deployment and least RBAC by
default, an autoscaling/v2 HPA on the pool's scale subresource with ``--autoscale-by cpu``."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from tests.fakes.sandbox_cli import run_sandbox

from ironflow import errors
from ironflow.agent_sandbox import autoscale, schemas


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha1"])
def test_the_hpa_follows_the_pool_and_targets_it_by_kind_and_name(version: str) -> None:
    code, out, err = run_sandbox(
        "render", "warm-pool", "--name", "pool", "-n", "agents", "--autoscale", "2:7", "--autoscale-by", "cpu",
        "--api-version", version,
    )  # fmt: skip
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in docs]
    assert kinds == ["SandboxTemplate", "SandboxWarmPool", "HorizontalPodAutoscaler", "SandboxClaim"]
    pool, hpa = docs[1], docs[2]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["metadata"] == {"name": "pool", "namespace": "agents", "labels": pool["metadata"]["labels"]}
    target = {"apiVersion": pool["apiVersion"], "kind": "SandboxWarmPool", "name": "pool"}
    assert hpa["spec"]["scaleTargetRef"] == target
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 7)
    kubernetes_validate.validate(hpa, "1.33", strict=True)
    # The pool's CRD (of either shipped version) has the scale subresource the HPA needs.
    for doc in docs:
        if doc["kind"] != "HorizontalPodAutoscaler":
            assert schemas.schema_problems(doc) == []


@pytest.mark.parametrize(
    ("bounds", "said"),
    [
        ("0:3", "MIN must be at least 1"),
        ("4:2", "MIN 4 is above MAX 2"),
        ("3", "use MIN:MAX"),
        ("a:b", "use MIN:MAX"),
        ("-1:2", "use MIN:MAX"),
        ("", "use MIN:MAX"),
    ],
)
def test_bad_bounds_exit_2_with_one_line(bounds: str, said: str) -> None:
    code, out, err = run_sandbox("render", "warm-pool", "--autoscale", bounds)
    assert code == 2
    assert out == ""
    assert said in err
    assert len(err.strip().splitlines()) == 1


def test_autoscale_is_refused_on_a_pattern_without_a_pool() -> None:
    code, _, err = run_sandbox("render", "ephemeral", "--autoscale", "1:2")
    assert code == 2
    assert "warm-pool" in err
    assert len(err.strip().splitlines()) == 1


def test_the_default_scaler_is_the_demand_scaler_with_only_its_rbac() -> None:
    code, out, err = run_sandbox("render", "warm-pool", "--name", "pool", "-n", "agents", "--autoscale", "2:7")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in docs]
    assert kinds == [
        "SandboxTemplate", "SandboxWarmPool", "ServiceAccount", "Role", "RoleBinding", "Deployment", "SandboxClaim"
    ]  # fmt: skip
    _, _, account, role, binding, deployment, _ = docs
    assert {d["metadata"]["name"] for d in (account, role, binding, deployment)} == {"pool-scaler"}
    read, only = ["get", "list", "watch"], {"apiGroups": ["extensions.agents.x-k8s.io"], "resourceNames": ["pool"]}
    assert role["rules"] == [
        {"apiGroups": only["apiGroups"], "resources": ["sandboxclaims"], "verbs": read},
        {**only, "resources": ["sandboxwarmpools"], "verbs": read},
        {**only, "resources": ["sandboxwarmpools/scale"], "verbs": ["get", "patch"]},
    ]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pool-scaler", "namespace": "agents"}]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "pool-scaler"
    (container,) = pod["containers"]
    assert container["args"] == [
        "sandbox", "pool-scaler", "--pool", "pool", "-n", "agents", "--min", "2", "--max", "7", "--spare", "1",
        "--ready-time", "30s", "--window", "60s", "--cooldown", "300s",
    ]  # fmt: skip
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["replicas"] == 1
    for doc in (account, role, binding, deployment):
        kubernetes_validate.validate(doc, "1.33", strict=True)


def test_the_scaler_deployments_args_are_what_the_pool_scaler_command_accepts() -> None:
    """The rendered args parse: a bad value would make them refuse before any cluster call."""
    code, out, _ = run_sandbox("render", "warm-pool", "--autoscale", "1:3")
    assert code == 0
    (deployment,) = [d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    _, _, err = run_sandbox(*args[1:], "--kubeconfig", "/nonexistent/kubeconfig")
    # Past the option checks: it stopped at the missing kubeconfig, not at its own input.
    assert err.strip() == "error: kubeconfig file '/nonexistent/kubeconfig' does not exist"


def test_autoscale_by_something_else_is_refused() -> None:
    code, out, err = run_sandbox("render", "warm-pool", "--autoscale", "1:2", "--autoscale-by", "memory")
    assert (code, out) == (2, "")
    assert err.strip() == "error: invalid --autoscale-by 'memory': use demand or cpu"


def test_without_autoscale_no_hpa_is_rendered() -> None:
    code, out, _ = run_sandbox("render", "warm-pool")
    assert code == 0
    assert "HorizontalPodAutoscaler" not in [d["kind"] for d in yaml.safe_load_all(out)]


def test_the_renderer_refuses_what_is_no_pool_and_bad_targets() -> None:
    with pytest.raises(errors.ConfigError, match="not a Sandbox"):
        autoscale.warm_pool_hpa({"kind": "Sandbox", "metadata": {"name": "x"}}, min_replicas=1, max_replicas=2)
    pool = {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool", "metadata": {"name": "p"}}
    with pytest.raises(errors.ConfigError, match="1-100"):
        autoscale.warm_pool_hpa(pool, min_replicas=1, max_replicas=2, cpu_utilization=0)
    with pytest.raises(errors.ConfigError, match="MIN <= MAX"):
        autoscale.warm_pool_hpa(pool, min_replicas=3, max_replicas=2)
