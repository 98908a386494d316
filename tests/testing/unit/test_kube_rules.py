"""The test server's API rules (pure): selectors, names, labels, merge patches, continue tokens."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_schemas as schemas

_label_values = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?", fullmatch=True)
_labels = st.dictionaries(st.sampled_from(["a", "b", "c", "x.io/d"]), _label_values, max_size=4)


@given(labels=_labels, key=st.sampled_from(["a", "b", "x.io/d"]), value=_label_values)
def test_equality_and_inequality_are_complements(labels: dict[str, str], key: str, value: str) -> None:
    """For any labels, key=value and key!=value select exactly one of them."""
    eq = rules.matches_labels(rules.parse_label_selector(f"{key}={value}"), labels)
    ne = rules.matches_labels(rules.parse_label_selector(f"{key}!={value}"), labels)
    assert eq != ne


@given(labels=_labels, key=st.sampled_from(["a", "b"]), values=st.lists(_label_values, min_size=1, max_size=3))
def test_in_and_notin_are_complements(labels: dict[str, str], key: str, values: list[str]) -> None:
    """key in (...) and key notin (...) partition every label set."""
    joined = ",".join(values)
    inside = rules.matches_labels(rules.parse_label_selector(f"{key} in ({joined})"), labels)
    outside = rules.matches_labels(rules.parse_label_selector(f"{key} notin ({joined})"), labels)
    assert inside != outside


@given(labels=_labels, key=st.sampled_from(["a", "b", "x.io/d"]))
def test_exists_and_not_exists_are_complements(labels: dict[str, str], key: str) -> None:
    """key and !key partition every label set."""
    assert rules.matches_labels(rules.parse_label_selector(key), labels) != rules.matches_labels(
        rules.parse_label_selector(f"!{key}"), labels
    )


def test_empty_selector_matches_everything() -> None:
    """No selector selects all objects, even unlabelled ones."""
    assert rules.matches_labels(rules.parse_label_selector(""), None)
    assert rules.matches_labels(rules.parse_label_selector(None), {"a": "b"})


def test_ironflow_selectors_parse() -> None:
    """The selectors ironflow itself sends parse into their requirements."""
    parsed = rules.parse_label_selector(
        "app.kubernetes.io/managed-by=ironflow,app.kubernetes.io/component=claude-runner"
    )
    assert [(r.key, r.op, r.values) for r in parsed] == [
        ("app.kubernetes.io/managed-by", "=", ("ironflow",)),
        ("app.kubernetes.io/component", "=", ("claude-runner",)),
    ]


@pytest.mark.parametrize("selector", ["a in b", "a in ()", "a=b=c", "=b", "a in (b", "UPPER_/x=y"])
def test_malformed_label_selectors_are_refused(selector: str) -> None:
    """Malformed selectors raise InvalidInput with status 400."""
    with pytest.raises(rules.InvalidInput) as caught:
        rules.parse_label_selector(selector)
    assert caught.value.code == 400


def test_field_selector_supports_metadata_name_and_pod_phase() -> None:
    """metadata.name works everywhere, status.phase on pods; others are refused."""
    pod = {"metadata": {"name": "p", "namespace": "n"}, "status": {"phase": "Running"}}
    assert rules.matches_fields(rules.parse_field_selector("metadata.name=p", "configmaps"), pod)
    assert rules.matches_fields(rules.parse_field_selector("status.phase!=Failed", "pods"), pod)
    with pytest.raises(rules.InvalidInput, match=r"field label not supported: status\.phase"):
        rules.parse_field_selector("status.phase=Running", "configmaps")


@pytest.mark.parametrize(
    ("name", "label", "ok"),
    [
        ("claude-code-18c-ab", False, True),
        ("a.b.c", False, True),
        ("a.b", True, False),
        ("Upper", False, False),
        ("-lead", False, False),
        ("x" * 64, True, False),
        ("x" * 253, False, True),
    ],
)
def test_object_names_follow_rfc_1123(name: str, label: bool, ok: bool) -> None:
    """Names are RFC 1123 subdomains (labels for namespaces and Jobs)."""
    assert (not rules.name_errors(name, label=label)) is ok


def test_label_errors_name_the_bad_key_and_value() -> None:
    """Too-long values and malformed keys are reported under metadata.labels."""
    problems = rules.label_errors({"ok": "fine", "bad key": "v", "k": "v" * 64})
    assert len(problems) == 2
    assert all(p.startswith("metadata.labels:") for p in problems)


@given(
    target=st.dictionaries(
        st.sampled_from("abc"), st.integers() | st.dictionaries(st.sampled_from("xy"), st.integers())
    ),
    patch=st.dictionaries(st.sampled_from("abc"), st.none() | st.integers()),
)
def test_merge_patch_sets_and_removes_keys(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """Every non-null patched key takes the patch's value; every null key is gone; others stay."""
    out = rules.merge_patch(target, patch)
    for key, value in patch.items():
        if value is None:
            assert key not in out
        else:
            assert out[key] == value
    for key in target.keys() - patch.keys():
        assert out[key] == target[key]


def test_merge_patch_merges_nested_objects() -> None:
    """Nested objects merge instead of being replaced."""
    assert rules.merge_patch({"m": {"a": 1, "b": 2}}, {"m": {"b": None, "c": 3}}) == {"m": {"a": 1, "c": 3}}


@given(rv=st.integers(min_value=0, max_value=2**40), key=st.text(max_size=80))
def test_continue_tokens_round_trip(rv: int, key: str) -> None:
    """A continue token decodes to what was encoded."""
    assert rules.decode_continue(rules.encode_continue(rv, key)) == (rv, key)


def test_foreign_continue_token_is_refused() -> None:
    """A token the server never issued is a 400."""
    with pytest.raises(rules.InvalidInput):
        rules.decode_continue("bm90LWpzb24=")


def test_status_body_is_shaped_like_the_api_servers() -> None:
    """Failure bodies carry kind Status, status Failure, reason and code."""
    body = rules.status_body(404, "NotFound", 'pods "x" not found', details={"name": "x", "kind": "pods"})
    assert body["kind"] == "Status"
    assert body["status"] == "Failure"
    assert (body["reason"], body["code"]) == ("NotFound", 404)
    assert body["details"]["name"] == "x"


def test_strict_crd_schema_closes_listed_objects_but_keeps_preserved_ones_open() -> None:
    """Objects with properties refuse unknown fields, unless x-kubernetes-preserve-unknown-fields."""
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {}},
        },
    }
    validator = schemas.crd_validator(schema)
    assert not schemas.validation_messages(validator, {"apiVersion": "x/v1", "kind": "K", "spec": {"a": "s"}})
    assert schemas.validation_messages(validator, {"spec": {"b": 1}})
    assert not schemas.validation_messages(validator, {"extra": {"anything": 1}})


def test_builtin_validator_refuses_unknown_pod_fields() -> None:
    """Built-in kinds use kubernetes-validate's strict schema; unknown kinds have none."""
    validator = schemas.builtin_validator("Pod", "v1", "1.37")
    assert validator is not None
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [], "nope": 1}}
    assert any("nope" in p for p in schemas.validation_messages(validator, pod))
    assert schemas.builtin_validator("NoSuchKind", "v1", "1.37") is None


def test_object_problems_check_name_labels_and_configmap_size() -> None:
    """A valid object has no problems; a bad name, no name, or 1 MiB of data each give one."""
    ok = {"metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "v"}}
    assert rules.object_problems(ok, "a", name_is_label=False, is_configmap=True) == []
    assert rules.object_problems({"metadata": {"name": "A_"}}, "A_", name_is_label=False, is_configmap=False)
    nameless = rules.object_problems({"metadata": {}}, "", name_is_label=False, is_configmap=False)
    assert nameless == ["metadata.name: Required value: name or generateName is required"]
    big = {"metadata": {"name": "big"}, "data": {"k": "x" * (1024 * 1024)}}
    assert rules.object_problems(big, "big", name_is_label=False, is_configmap=True) == [
        "[]: Too long: must have at most 1048576 bytes"
    ]
    assert (
        rules.object_problems({"metadata": {"generateName": "gen-"}}, "gen-", name_is_label=False, is_configmap=False)
        == []
    )


def test_pod_update_problems_allow_images_and_deadline_only() -> None:
    """Changing an image or activeDeadlineSeconds is allowed; changing a command is not."""
    spec = {"containers": [{"name": "c", "image": "a", "command": ["x"]}]}
    assert rules.pod_update_problems(spec, {**spec, "activeDeadlineSeconds": 5}) == []
    assert rules.pod_update_problems(spec, {"containers": [{"name": "c", "image": "b", "command": ["x"]}]}) == []
    assert rules.pod_update_problems(spec, {"containers": [{"name": "c", "image": "a", "command": ["y"]}]})


def test_update_problems_guard_immutable_configmaps_and_job_templates() -> None:
    """An immutable ConfigMap keeps its data; a Job keeps its template; labels may change."""
    cm = {"immutable": True, "data": {"prompt": "a"}, "metadata": {"labels": {}}}
    assert rules.update_problems("ConfigMap", cm, {**cm, "metadata": {"labels": {"x": "y"}}}) == []
    assert rules.update_problems("ConfigMap", cm, {**cm, "data": {"prompt": "b"}})
    assert rules.update_problems("ConfigMap", {"data": {"a": "1"}}, {"data": {"a": "2"}}) == []
    job = {"spec": {"template": {"spec": {"containers": []}}, "backoffLimit": 1}}
    assert rules.update_problems("Job", job, {"spec": {**job["spec"], "backoffLimit": 2}}) == []
    assert rules.update_problems("Job", job, {"spec": {"template": {"spec": {}}, "backoffLimit": 1}})
