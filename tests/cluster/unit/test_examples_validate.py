"""Every manifest under ``examples/`` validates offline: core kinds against the Kubernetes 1.30
and 1.37 schemas in strict mode (unknown fields refused), agent-sandbox kinds against the CRD
schemas ironflow ships, CiliumNetworkPolicies against ``ironflow.cluster.cilium``'s structural
check, kustomizations by the files they reference. A kind none of these knows fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from ironflow.cluster import cilium, setup

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
VERSIONS = ("1.30.0", "1.37.0")
KUSTOMIZATION = ("kustomize.config.k8s.io/v1beta1", "Kustomization")


def _is_manifest(doc: object) -> bool:
    """A Kubernetes object (other YAML under examples/, e.g. fake-API scripts, is not)."""
    return isinstance(doc, dict) and bool({"apiVersion", "kind", "metadata"} & set(doc))


def _documents() -> Iterator[tuple[str, int, dict[str, Any]]]:
    for path in sorted(EXAMPLES.rglob("*.y*ml")):
        for index, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if _is_manifest(doc):
                yield str(path.relative_to(EXAMPLES)), index, doc


DOCUMENTS = list(_documents())
_OTHER = ("cilium.io/", "kustomize.config.k8s.io/", "agents.x-k8s.io/", "extensions.agents.x-k8s.io/")
CORE = [(p, i, d) for p, i, d in DOCUMENTS if not d["apiVersion"].startswith(_OTHER)]
AGENT_SANDBOX = [(p, i, d) for p, i, d in DOCUMENTS if d["apiVersion"].split("/")[0].endswith("agents.x-k8s.io")]
CILIUM = [(p, i, d) for p, i, d in DOCUMENTS if d["apiVersion"].startswith("cilium.io/")]
KUSTOMIZATIONS = [(p, d) for p, _, d in DOCUMENTS if (d["apiVersion"], d["kind"]) == KUSTOMIZATION]


def test_every_yaml_document_under_examples_k8s_is_a_manifest() -> None:
    for path in (EXAMPLES / "k8s").rglob("*.y*ml"):
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
        assert docs
        assert all(_is_manifest(d) and "apiVersion" in d and "kind" in d for d in docs), path


def test_the_example_set_is_found() -> None:
    assert len(CORE) >= 15
    assert len(CILIUM) >= 5
    assert len(KUSTOMIZATIONS) >= 2


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("path", "index", "doc"), CORE, ids=[f"{p}#{i}" for p, i, _ in CORE])
def test_core_manifest_validates_strictly(path: str, index: int, doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(("path", "index", "doc"), AGENT_SANDBOX, ids=[f"{p}#{i}" for p, i, _ in AGENT_SANDBOX])
def test_agent_sandbox_manifest_matches_the_shipped_crd_schema(path: str, index: int, doc: dict[str, Any]) -> None:
    from ironflow.agent_sandbox import schemas

    assert schemas.schema_problems(doc) == []


@pytest.mark.parametrize(("path", "index", "doc"), CILIUM, ids=[f"{p}#{i}" for p, i, _ in CILIUM])
def test_cilium_policy_passes_the_structural_check(path: str, index: int, doc: dict[str, Any]) -> None:
    assert cilium.check_cilium_network_policy(doc) == []


@pytest.mark.parametrize(("path", "doc"), KUSTOMIZATIONS, ids=[p for p, _ in KUSTOMIZATIONS])
def test_kustomization_references_only_existing_files(path: str, doc: dict[str, Any]) -> None:
    base = (EXAMPLES / path).parent
    assert set(doc) <= {"apiVersion", "kind", "namespace", "resources", "generatorOptions", "configMapGenerator"}
    for resource in doc.get("resources", []):
        target = base / resource
        assert target.is_file() or (target / "kustomization.yaml").is_file(), f"{path}: {resource} does not exist"
    for generator in doc.get("configMapGenerator", []):
        for file in generator["files"]:
            assert (base / file).is_file(), f"{path}: {file} does not exist"


def test_strict_validation_refuses_an_unknown_field() -> None:
    """The validator used above is strict: a typo in a NetworkPolicy is caught, not ignored."""
    doc = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "x"},
        "spec": {"podSelector": {}, "policyTypo": ["Egress"]},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)


VARIANTS = [
    setup.ClusterSetup(),
    setup.ClusterSetup(cilium=True, gvisor=True, check_rbac=True),
    setup.ClusterSetup(auth_proxy_url="https://proxy.security", environment_claims=True),
    setup.ClusterSetup(namespace="agents", auth_proxy_url=setup.DEFAULT_AUTH_PROXY_URL, cilium=True),
]


@pytest.mark.parametrize("config", VARIANTS)
def test_every_rendered_variant_validates(config: setup.ClusterSetup) -> None:
    for obj in setup.render(config, profile={"CLAUDE.md": "# hi\n", "rules/a.md": "a\n"}):
        if obj["apiVersion"].startswith("cilium.io/"):
            assert cilium.check_cilium_network_policy(obj) == []
        else:
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
