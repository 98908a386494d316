"""Every pattern in both API versions validates against the schema of the release that serves it:
v0.4.6 for ``v1alpha1``, v1.0.3 (what the real-API tier runs) for ``v1beta1``; the KRO patterns'
agent-sandbox children too, resolved for one instance (issue 16, "must show")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pytest
from tests.fakes import kro_instance

from ironflow.agent_sandbox import catalog, models, patterns, schemas

RELEASE: Final = {models.ApiVersion.V1ALPHA1: "v0.4.6", models.ApiVersion.V1BETA1: "v1.0.3"}
GROUPS: Final = (models.CORE_GROUP, models.EXTENSIONS_GROUP)
#: The instance fields the KRO RGDs require, and a schedule so the CronJob's children resolve too.
INSTANCE: Final = {"prompt": "Fix the bug.", "schedule": "0 * * * *", "workspacePVC": "w", "memoryPVC": "m"}


def options(pattern: str, version: models.ApiVersion) -> patterns.PatternOptions:
    egress = (("10.20.0.0/16", 443),) if pattern == "network-custom-egress" else ()
    return patterns.PatternOptions(namespace="agents", name=f"p-{pattern}", api_version=version, egress=egress)


def expanded(docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    return kro_instance.expand(docs, name="run-1", namespace=namespace, spec=INSTANCE)


def agent_sandbox_objects(docs: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    return [d for d in docs if str(d["apiVersion"]).split("/")[0] in GROUPS]


def test_each_version_is_checked_against_the_release_that_serves_it() -> None:
    assert {str(v): r for v, r in RELEASE.items()} == schemas.DEFAULT_RELEASE
    for version, release in RELEASE.items():
        for crd in schemas.crd_documents(release):
            assert str(version) in {v["name"] for v in crd["spec"]["versions"] if v["served"]}


@pytest.mark.parametrize("version", list(models.ApiVersion))
@pytest.mark.parametrize("pattern", list(catalog.PATTERNS))
def test_every_pattern_validates_against_its_release(pattern: str, version: models.ApiVersion) -> None:
    docs = expanded(catalog.render_pattern(pattern, options(pattern, version)), "agents")
    objects = agent_sandbox_objects(docs)
    assert objects, f"{pattern} renders no agent-sandbox object"
    for obj in objects:
        assert obj["apiVersion"].endswith("/" + str(version))
        assert schemas.schema_problems(obj, release=RELEASE[version]) == [], obj["kind"]


def test_the_kro_children_are_resolved_with_their_types() -> None:
    """The pool's replicas is an integer after resolution (as KRO passes it), the names interpolated."""
    (rgd,) = catalog.render_pattern("kro-template", options("kro-template", models.ApiVersion.V1BETA1))
    children = kro_instance.children(rgd, name="run-1", namespace="agents", spec={"prompt": "p", "replicas": 3})
    by_kind = {c["kind"]: c for c in children}
    assert by_kind["SandboxWarmPool"]["spec"]["replicas"] == 3
    assert by_kind["SandboxClaim"]["metadata"]["name"] == "run-1-run"
    assert by_kind["SandboxClaim"]["spec"]["warmPoolRef"] == {"name": "run-1"}
    with pytest.raises(ValueError, match=r"needs spec\.prompt"):
        kro_instance.children(rgd, name="run-1", namespace="agents")


def test_a_schema_problem_inside_an_rgd_is_found() -> None:
    """The check can fail: a child the v1.0.3 schema refuses (a v1alpha1 field) is reported."""
    (rgd,) = catalog.render_pattern("kro-template", options("kro-template", models.ApiVersion.V1BETA1))
    pool = next(r for r in rgd["spec"]["resources"] if r["template"]["kind"] == "SandboxWarmPool")
    pool["template"]["spec"]["warmpool"] = "none"
    objects = agent_sandbox_objects(expanded([rgd], "agents"))
    problems = [p for o in objects for p in schemas.schema_problems(o, release="v1.0.3")]
    assert problems == ["spec: Additional properties are not allowed ('warmpool' was unexpected)"]
