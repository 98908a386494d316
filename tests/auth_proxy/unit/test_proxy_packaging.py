"""The auth proxy's image and Kubernetes example: non-root, read-only, secrets by reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "examples" / "k8s" / "sandbox" / "auth-proxy.yaml"
DOCKERFILE = ROOT / "docker" / "auth-proxy" / "Dockerfile"
POLICY = ROOT / "examples" / "k8s" / "sandbox" / "networkpolicy-egress-auth-proxy.yaml"


def _docs() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}


def test_example_manifest_is_valid_kubernetes() -> None:
    docs = _docs()
    assert set(docs) == {"Deployment", "Service", "PodDisruptionBudget"}
    for doc in docs.values():
        kubernetes_validate.validate(doc, "1.33", strict=True)


def test_deployment_is_hardened_probed_and_limited() -> None:
    pod = _docs()["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    assert not container["image"].endswith(":latest")


def test_admin_key_and_database_url_come_from_secrets_only() -> None:
    (container,) = _docs()["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name in ("IRONFLOW_AUTH_PROXY_ADMIN_KEY", "IRONFLOW_AUTH_PROXY_DATABASE_URL", "IRONFLOW_SECRET_KEYS"):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "ironflow-auth-proxy"
    assert "sk-ant" not in MANIFEST.read_text()


def test_service_and_budget_select_the_pods_the_network_policy_opens() -> None:
    docs = _docs()
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    policies = [d for d in yaml.safe_load_all(POLICY.read_text()) if d["metadata"]["name"] == "ironflow-auth-proxy"]
    assert policies[0]["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert docs["Deployment"]["metadata"]["namespace"] == policies[0]["metadata"]["namespace"]
    ports = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [p["containerPort"] for p in ports] == [8080, 3128]  # the model relay, the egress listener


def test_dockerfile_runs_the_proxy_as_a_non_root_user() -> None:
    text = DOCKERFILE.read_text()
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users == ["10001:10001"]
    assert 'ENTRYPOINT ["python", "-m", "ironflow.auth_proxy"]' in text
    assert "PYTHONDONTWRITEBYTECODE=1" in text  # nothing written at run time: read-only root works
    assert ":latest" not in text
