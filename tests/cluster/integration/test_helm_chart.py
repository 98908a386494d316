"""The real Helm (``scripts/helm build``) lints ``deploy/helm/ironflow``; ``helm template`` gives the
objects ``ironflow manifests`` gives for the same settings (defaults, and non-default values against
the matching flags); and the chart's output is accepted by the real kube-apiserver (server-side dry
run). Skipped with the reason when helm, or the control plane, is not built."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from tests.fakes.server_dry_run import dry_run_set
from typer.testing import CliRunner

from ironflow.cli import manifests
from ironflow.testing import helm
from ironflow.testing.kubeenv import KubeEnv

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "ironflow"
DEFAULT_FLAGS = (
    "--auth-proxy",
    "http://ironflow-auth-proxy.ironflow-system",
    "--auth-proxy-deployment",
    "--worker-deployment",
)

try:
    HELM: Path | None = helm.find_helm()
    SKIP = ""
except helm.HelmNotAvailable as exc:
    HELM, SKIP = None, str(exc)

pytestmark = pytest.mark.skipif(HELM is None, reason=SKIP)

app = typer.Typer()
app.callback()(lambda: None)
manifests.register(app)


def _objects(text: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    keyed = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}
    assert len(keyed) == len(docs), "an object is rendered twice"
    return keyed


def _template(*sets: str) -> str:
    args = [a for s in sets for a in ("--set", s)]
    done = helm.run_helm("template", "ironflow", str(CHART), *args, helm=HELM)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _manifests(*flags: str) -> str:
    result = CliRunner().invoke(app, ["manifests", *flags])
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_helm_lint_passes() -> None:
    done = helm.run_helm("lint", "--strict", str(CHART), helm=HELM)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_helm_template_with_the_defaults_equals_ironflow_manifests() -> None:
    assert _objects(_template()) == _objects(_manifests(*DEFAULT_FLAGS))


def test_helm_template_with_values_equals_ironflow_manifests_with_the_matching_flags() -> None:
    rendered = _template(
        "namespaces.agents=team-agents",
        "namespaces.worker=team-worker",
        "authProxy.namespace=team-proxy",
        "authProxy.port=8081",
        "authProxy.replicas=3",
        "worker.image=reg.example/worker:9",
        "worker.resources.limits.memory=2Gi",
        "cilium=true",
        "gvisor=true",
        "agentSandboxRbac=true",
    )
    expected = _manifests(
        "-n",
        "team-agents",
        "--worker-namespace",
        "team-worker",
        "--auth-proxy",
        "http://ironflow-auth-proxy.team-proxy:8081",
        "--auth-proxy-deployment",
        "--auth-proxy-replicas",
        "3",
        "--worker-deployment",
        "--worker-image",
        "reg.example/worker:9",
        "--worker-resources",
        "limits.memory=2Gi",
        "--cilium",
        "--gvisor",
        "--agent-sandbox-rbac",
    )
    assert _objects(rendered) == _objects(expected)


def test_switching_the_deployments_off_leaves_the_set_up_objects() -> None:
    rendered = _objects(_template("authProxy.enabled=false", "worker.enabled=false"))
    assert rendered == _objects(_manifests("--auth-proxy", "http://ironflow-auth-proxy.ironflow-system"))


def test_realkube_the_chart_output_is_accepted_by_the_apiserver(kube_env: KubeEnv) -> None:
    tag = uuid.uuid4().hex[:8]
    text = _template(
        f"namespaces.agents=helm-agents-{tag}",
        f"namespaces.worker=helm-worker-{tag}",
        f"authProxy.namespace=helm-proxy-{tag}",
        "environmentClaims=true",
        "checkRbac=true",
        "agentSandboxRbac=true",
        "gvisor=true",
    )  # sandboxRouter.enabled: its objects live in agent-sandbox-system, which the controller's install
    # makes; tests/agent_sandbox/real_node/test_real_node_sandbox_router.py applies them for real
    objects = list(_objects(text).values())
    with dry_run_set(kube_env, objects) as answers:
        kinds = {a["kind"] for a in answers}
    assert {"Deployment", "Service", "PodDisruptionBudget", "Pod", "NetworkPolicy", "RuntimeClass"} <= kinds
    assert all(a["metadata"].get("uid") for a in answers)  # the server admitted each one


@pytest.mark.parametrize(
    ("value", "flags"),
    [
        ("authProxy.enabled=false", [f for f in DEFAULT_FLAGS if f != "--auth-proxy-deployment"]),
        ("worker.enabled=false", [f for f in DEFAULT_FLAGS if f != "--worker-deployment"]),
        ("cilium=true", [*DEFAULT_FLAGS, "--cilium"]),
        ("gvisor=true", [*DEFAULT_FLAGS, "--gvisor"]),
        ("environmentClaims=true", [*DEFAULT_FLAGS, "--environment-claims"]),
        ("checkRbac=true", [*DEFAULT_FLAGS, "--check-rbac"]),
        ("agentSandboxRbac=true", [*DEFAULT_FLAGS, "--agent-sandbox-rbac"]),
        ("sandboxRouter.enabled=true", [*DEFAULT_FLAGS, "--sandbox-router"]),
    ],
)
def test_each_switch_alone_equals_its_flag(value: str, flags: list[str]) -> None:
    assert _objects(_template(value)) == _objects(_manifests(*flags))
