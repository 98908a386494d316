"""The shipped CRD schemas as JSON Schema: strict objects, int-or-string, preserved unknown fields."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors
from ironflow.agent_sandbox import schemas


def sandbox(spec: dict[str, Any], version: str = "v1beta1") -> dict[str, Any]:
    return {"apiVersion": f"agents.x-k8s.io/{version}", "kind": "Sandbox", "metadata": {"name": "s"}, "spec": spec}


def pod(**container: Any) -> dict[str, Any]:
    return {"podTemplate": {"spec": {"containers": [{"name": "a", "image": "i", **container}]}}}


def test_releases_ship_four_crds_each_and_serve_the_documented_versions() -> None:
    for release in schemas.RELEASES:
        assert [c["spec"]["names"]["kind"] for c in schemas.crd_documents(release)] == [
            "Sandbox",
            "SandboxTemplate",
            "SandboxClaim",
            "SandboxWarmPool",
        ]
    served = {v["name"] for v in schemas.crd("SandboxClaim", "v1.0.3")["spec"]["versions"]}
    assert served == {"v1beta1"}  # 1.0 dropped v1alpha1
    assert {v["name"] for v in schemas.crd("SandboxClaim", "v0.4.6")["spec"]["versions"]} == {"v1alpha1"}


@pytest.mark.parametrize("value", [8888, "http"])
def test_int_or_string_fields_take_either(value: object) -> None:
    probe = {"httpGet": {"port": value, "path": "/"}}
    assert schemas.schema_problems(sandbox(pod(readinessProbe=probe))) == []


def test_int_or_string_fields_refuse_other_types() -> None:
    probe = {"httpGet": {"port": 1.5, "path": "/"}}
    assert schemas.schema_problems(sandbox(pod(readinessProbe=probe)))


def test_unknown_fields_are_refused_at_every_level_with_their_path() -> None:
    (problem,) = schemas.schema_problems(sandbox({**pod(), "replicas": 1}))
    assert problem.startswith("spec: Additional properties are not allowed ('replicas'")
    assert schemas.schema_problems(sandbox({**pod(), "replicas": 1}, "v1alpha1")) == []  # v1alpha1 has replicas


def test_wrong_types_and_enums_are_refused() -> None:
    problems = schemas.schema_problems(sandbox({**pod(), "shutdownPolicy": "Keep"}))
    assert problems == ["spec.shutdownPolicy: 'Keep' is not one of ['Delete', 'Retain']"]


def test_metadata_is_left_to_the_api_server() -> None:
    obj = sandbox(pod())
    obj["metadata"] = {"name": "s", "labels": {"a": "b"}, "ownerReferences": []}
    assert schemas.schema_problems(obj) == []


def test_validate_names_the_object_and_the_version() -> None:
    with pytest.raises(errors.ConfigError, match=r"Sandbox 's' does not match the agents\.x-k8s\.io/v1beta1 schema"):
        schemas.validate(sandbox({}))


def test_unknown_kind_version_and_release_are_refused() -> None:
    with pytest.raises(errors.ConfigError, match="unknown agent-sandbox kind 'Pod'"):
        schemas.schema_problems({"apiVersion": "v1", "kind": "Pod"})
    with pytest.raises(errors.ConfigError, match=r"unknown agent-sandbox API version 'v2'"):
        schemas.openapi_schema("Sandbox", "v2")
    with pytest.raises(errors.ConfigError, match=r"shipped: v0\.4\.6, v1\.0\.3"):
        schemas.crd("Sandbox", "v9")
    with pytest.raises(errors.ConfigError, match=r"has no version v1beta1 in release v0\.4\.6"):
        schemas.openapi_schema("Sandbox", "v1beta1", "v0.4.6")
