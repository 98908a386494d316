"""``merge_patch_to`` with the CRD's spec schema: the apiserver's defaults are no difference.

The real apiserver (agent-sandbox v1.0.3 CRDs) fills ``envVarsInjectionPolicy``,
``networkPolicyManagement`` and ``volumeClaimTemplatesPolicy`` into a SandboxTemplate that
leaves them out; without the schema every ``apply-template`` would report "updated".
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ironflow.agent_sandbox import apply, schemas

SPEC = schemas.openapi_schema("SandboxTemplate", "v1beta1")["properties"]["spec"]
DEFAULTS = {k: p["default"] for k, p in SPEC["properties"].items() if "default" in p}


def test_the_v1beta1_template_schema_defaults_the_three_policies() -> None:
    assert DEFAULTS == {
        "envVarsInjectionPolicy": "Disallowed",
        "networkPolicyManagement": "Managed",
        "volumeClaimTemplatesPolicy": "Disallowed",
    }


@given(st.sets(st.sampled_from(sorted(DEFAULTS))))
def test_server_filled_defaults_are_unchanged(filled: set[str]) -> None:
    desired: dict[str, Any] = {"spec": {"podTemplate": {"spec": {"containers": [{"name": "c"}]}}}}
    current = {"spec": {**desired["spec"], **{k: DEFAULTS[k] for k in filled}}}
    assert apply.merge_patch_to(current, desired, spec_schema=SPEC) == {}


@given(st.sampled_from(sorted(DEFAULTS)))
def test_a_non_default_value_we_left_out_is_removed(key: str) -> None:
    desired: dict[str, Any] = {"spec": {"podTemplate": {}}}
    current = {"spec": {"podTemplate": {}, key: "SomethingElse"}}
    assert apply.merge_patch_to(current, desired, spec_schema=SPEC) == {"spec": {key: None}}


def test_without_the_schema_every_left_out_field_is_removed() -> None:
    current = {"spec": {"podTemplate": {}, "networkPolicyManagement": "Managed"}}
    assert apply.merge_patch_to(current, {"spec": {"podTemplate": {}}}) == {"spec": {"networkPolicyManagement": None}}


def test_a_nested_change_is_still_a_patch_with_the_schema() -> None:
    current = {"spec": {"podTemplate": {"metadata": {"labels": {"a": "1"}}}, "networkPolicyManagement": "Managed"}}
    desired = {"spec": {"podTemplate": {"metadata": {"labels": {"a": "2"}}}}}
    patch = apply.merge_patch_to(current, desired, spec_schema=SPEC)
    assert patch == {"spec": {"podTemplate": {"metadata": {"labels": {"a": "2"}}}}}
