"""``sandbox render warm-pool --autoscale MIN:MAX``: an autoscaling/v2 HPA on the pool's scale subresource."""

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
        "render", "warm-pool", "--name", "pool", "-n", "agents", "--autoscale", "2:7", "--api-version", version
    )
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
