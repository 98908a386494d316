"""The shipped CRD schemas as JSON Schema: strict objects, int-or-string, preserved unknown fields."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ironflow import errors
from ironflow.agent_sandbox import models, rendering, schemas


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


SEED_CLAIM: dict[str, Any] = {  # the seed's SandboxClaim: a warm-pool policy plus env
    "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
    "kind": "SandboxClaim",
    "metadata": {"name": "my-agent-run", "namespace": "default"},
    "spec": {
        "sandboxTemplateRef": {"name": "my-agent-template"},
        "warmpool": "default",
        "lifecycle": {
            "shutdownTime": "2025-12-31T23:59:59Z",
            "ttlSecondsAfterFinished": 300,
            "shutdownPolicy": "Delete",
        },
        "additionalPodMetadata": {"labels": {"run-id": "abc123"}},
        "env": [
            {"name": "TARGET_REPO", "value": "owner/repo"},
            {"name": "AGENT_TASK", "value": "Fix the login bug"},
            {"name": "MY_VAR", "value": "value", "containerName": "specific-container"},
        ],
    },
}


def _seed_claim_value(warm_pool: str | None) -> models.SandboxClaim:
    return models.SandboxClaim(
        "my-agent-run",
        api_version=models.ApiVersion.V1ALPHA1,
        template="my-agent-template",
        warm_pool=warm_pool,
        lifecycle=models.Lifecycle("2025-12-31T23:59:59Z", models.ShutdownPolicy.DELETE, 300),
        pod_labels={"run-id": "abc123"},
        env=(
            models.ClaimEnvVar("TARGET_REPO", "owner/repo"),
            models.ClaimEnvVar("AGENT_TASK", "Fix the login bug"),
            models.ClaimEnvVar("MY_VAR", "value", "specific-container"),
        ),
    )


@pytest.mark.parametrize("warm_pool", ["default", "my-pool", None])
def test_validate_refuses_the_seed_claim_as_render_does(warm_pool: str | None) -> None:
    """The 0.4.x controller rejects env on a claim that may adopt a warm sandbox: both entry
    points refuse it, in the same words."""
    raw = copy.deepcopy(SEED_CLAIM)
    if warm_pool is None:
        del raw["spec"]["warmpool"]
    else:
        raw["spec"]["warmpool"] = warm_pool
    assert schemas.schema_problems(raw) == []  # the schema alone accepts it
    with pytest.raises(errors.ConfigError) as rendered:
        rendering.render(_seed_claim_value(warm_pool))
    with pytest.raises(errors.ConfigError) as validated:
        schemas.validate(raw)
    assert validated.value.message == rendered.value.message
    assert "agent-sandbox 0.4.x refuses that unless the claim's warm pool policy 'none'" in validated.value.message
    assert "Fix the login bug" not in validated.value.message


def test_validate_and_render_both_accept_the_seed_claim_as_a_cold_start() -> None:
    raw = copy.deepcopy(SEED_CLAIM)
    raw["spec"]["warmpool"] = "none"
    schemas.validate(raw)
    assert rendering.render(_seed_claim_value("none"))["spec"] == raw["spec"]
