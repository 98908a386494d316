"""AgentConfig: immutable fluent builders, build-time refusals, round trips."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import AgentConfig, errors, labels, step_sandbox
from ironflow.results import AgentResult
from ironflow.secrets import Secret, find_leaks
from ironflow.step_sandbox import ConfigMapSource, HostPathSource, PodSettings, PvcSource, PvcVolume, validate_sub_path
from ironflow.steps import AccountLease, PermissionMode


def test_defaults_match_the_reference() -> None:
    cfg = AgentConfig("hi")
    assert cfg.model == "sonnet"
    assert cfg.permission_mode is PermissionMode.DEFAULT
    assert cfg.pod.is_empty()
    assert dict(cfg.pod_labels) == {}


def test_builders_return_new_objects_and_leave_the_original_alone() -> None:
    base = AgentConfig("hi")
    changed = base.read_only_pvc("repos", "/data/repos").service_account("sa").runtime_class("gvisor")
    assert base.pod.is_empty()
    assert changed.pod.service_account == "sa"
    assert changed.pod.runtime_class == "gvisor"
    assert changed.pod.read_only_volumes[0].source == PvcSource("repos")


def test_config_is_frozen() -> None:
    cfg = AgentConfig("hi")
    with pytest.raises(AttributeError):
        cfg.model = "opus"  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.pod_labels["x"] = "y"  # type: ignore[index]


def test_env_from_secret_replaces_same_var_in_place() -> None:
    cfg = AgentConfig("hi").env_from_secret("A", "s1", "k").env_from_secret("B", "s", "k")
    cfg = cfg.env_from_secret("A", "s2", "k2")
    assert [(e.name, e.secret, e.key) for e in cfg.pod.secret_env] == [("A", "s2", "k2"), ("B", "s", "k")]


def test_read_only_sources() -> None:
    cfg = AgentConfig("hi").read_only_host_path("/srv", "/data/srv").read_only_config_map("cm", "/data/cm")
    assert [v.source for v in cfg.pod.read_only_volumes] == [HostPathSource("/srv"), ConfigMapSource("cm")]


def test_scoped_labels_sanitise_run_and_step_by_the_one_rule() -> None:
    cfg = AgentConfig("hi").scoped("demo run", "fix bug/42")
    assert cfg.scope is not None
    assert cfg.pod_labels == {}
    assert cfg.scope.labels[labels.LABEL_RUN_ID] == labels.sanitize_label_value("demo run")
    assert cfg.scope.labels[labels.LABEL_STEP] == labels.sanitize_label_value("fix bug/42")
    assert labels.LABEL_ROOT_RUN_ID not in cfg.scope.labels


def test_a_scope_needs_a_run_and_a_step() -> None:
    with pytest.raises(errors.ConfigError, match="step scope run_id must be a non-empty string"):
        AgentConfig("hi").scoped("", "s")


def test_egress_profile_is_a_label() -> None:
    cfg = AgentConfig("hi").egress_profile("gitlab")
    assert cfg.pod_labels[labels.LABEL_EGRESS_PROFILE] == "gitlab"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prompt": ""}, "prompt must not be empty"),
        ({"prompt": "x", "max_turns": 0}, "max_turns must be greater than 0"),
        ({"prompt": "x", "max_budget_usd": 0.0}, "budget must be a positive finite number"),
        ({"prompt": "x", "max_budget_usd": float("nan")}, "budget must be a positive finite number"),
        ({"prompt": "x", "max_budget_usd": float("inf")}, "budget must be a positive finite number"),
        ({"prompt": "x", "resume_session_id": "a b"}, "resume_session_id must only hold"),
    ],
)
def test_invalid_values_raise_config_error_at_the_call(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        AgentConfig(**kwargs)  # type: ignore[arg-type]


def test_tools_and_json_schema_cannot_be_combined() -> None:
    with pytest.raises(errors.ConfigError, match="cannot be combined"):
        AgentConfig("x", allowed_tools=("Bash",), json_schema={"type": "object"})


def test_replace_validates_again() -> None:
    with pytest.raises(errors.ConfigError):
        AgentConfig("x").replace(max_turns=0)


def test_pvc_volume_refuses_bad_sub_path_and_empty_claim() -> None:
    with pytest.raises(errors.ConfigError, match="invalid pvc_volume: pvc volume needs a non-empty claim_name"):
        AgentConfig("x").pvc_volume("", "/data")
    with pytest.raises(errors.ConfigError, match="must be relative"):
        AgentConfig("x").pvc_volume("c", "/data", sub_path="../etc")


def test_k8s_validate_pvc_sub_path_accepts_nested_and_spaces() -> None:
    assert validate_sub_path("a/b c/d") is None
    assert validate_sub_path("repos/my project") is None


def test_k8s_validate_pvc_sub_path_refuses_structural_errors() -> None:
    for bad in ("/abs", "a//b", "a/./b", "a/..", "", "../x", "a/"):
        assert validate_sub_path(bad) is not None, bad


def test_k8s_pod_settings_is_empty() -> None:
    assert PodSettings().is_empty()
    assert not AgentConfig("x").service_account("sa").pod.is_empty()
    assert not AgentConfig("x").without_provider_volumes().pod.is_empty()


def test_k8s_pvc_volume_serde_skips_defaults() -> None:
    cfg = AgentConfig("x").pvc_volume("work", "/work")
    assert cfg.to_dict()["pod"] == {"pvc_volumes": [{"claim_name": "work", "mount_path": "/work"}]}
    full = AgentConfig("x").pvc_volume("work", "/work", sub_path="a", read_only=True)
    assert full.to_dict()["pod"]["pvc_volumes"][0] == {
        "claim_name": "work",
        "mount_path": "/work",
        "sub_path": "a",
        "read_only": True,
    }
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg


def test_read_only_volumes_are_written_as_provider_files_spell_them() -> None:
    """One spelling for a read-only volume in step and provider files (issue 33): ``pvc:``,
    ``host_path:`` or ``config_map:`` beside ``mount_path``."""
    cfg = (
        AgentConfig("x")
        .read_only_pvc("repos", "/data/repos")
        .read_only_host_path("/srv", "/data/srv")
        .read_only_volume(step_sandbox.ReadOnlyVolume(ConfigMapSource("conf"), "/data/conf", "a.json"))
    )
    assert cfg.to_dict()["pod"]["read_only_volumes"] == [
        {"pvc": "repos", "mount_path": "/data/repos"},
        {"host_path": "/srv", "mount_path": "/data/srv"},
        {"config_map": "conf", "mount_path": "/data/conf", "sub_path": "a.json"},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert AgentConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("source", "new_key"),
    [
        ({"PvcSource": {"claim_name": "repos"}}, "pvc"),
        ({"HostPathSource": {"path": "/srv"}}, "host_path"),
        ({"ConfigMapSource": {"name": "repos"}}, "config_map"),
    ],
)
def test_the_old_source_spelling_still_reads_with_a_deprecation_warning(source: dict[str, Any], new_key: str) -> None:
    old = {"prompt": "x", "pod": {"read_only_volumes": [{"source": source, "mount_path": "/data", "sub_path": "s"}]}}
    value = next(iter(next(iter(source.values())).values()))
    new = {"prompt": "x", "pod": {"read_only_volumes": [{new_key: value, "mount_path": "/data", "sub_path": "s"}]}}
    with pytest.warns(DeprecationWarning, match=rf"pod\.read_only_volumes\[0\]\.source: .* write '{new_key}: \.\.\.'"):
        assert AgentConfig.from_dict(old) == AgentConfig.from_dict(new)


def test_a_volume_with_both_spellings_is_refused_by_name() -> None:
    both = {"source": {"PvcSource": {"claim_name": "a"}}, "pvc": "a", "mount_path": "/data"}
    with pytest.raises(errors.ConfigError, match=r"pod\.read_only_volumes\[0\]\.source: is the old spelling of 'pvc'"):
        AgentConfig.from_dict({"prompt": "x", "pod": {"read_only_volumes": [both]}})


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "x y"]), min_size=1, max_size=5))
def test_sub_path_never_accepts_an_escape(segments: list[str]) -> None:
    sub_path = "/".join(segments)
    if validate_sub_path(sub_path) is None:
        assert ".." not in segments
        assert not sub_path.startswith("/")


def test_round_trip_through_dict() -> None:
    cfg = (
        AgentConfig("hi", model="opus", max_turns=3, verbose=True, json_schema={"type": "object"})
        .env_from_secret("A", "s", "k")
        .read_only_pvc("repos", "/data/repos")
        .read_only_config_map("cm", "/data/cm")
        .pvc_volume("work", "/work", sub_path="a", read_only=True)
        .managed_settings("locked")
        .scoped("r", "s")
        .input("https://example.com/x", "/inputs/x")
    )
    assert AgentConfig.from_dict(cfg.to_dict()) == cfg


def test_from_dict_refuses_unknown_keys_by_name() -> None:
    with pytest.raises(errors.ConfigError, match="unknown step setting 'modle'"):
        AgentConfig.from_dict({"prompt": "x", "modle": "opus"})
    with pytest.raises(errors.ConfigError, match="'prompt' is required"):
        AgentConfig.from_dict({"model": "opus"})


def test_account_lease_never_serialised_nor_printed() -> None:
    value = "sk-ant-oat01-" + "x" * 40
    cfg = AgentConfig("hi").account_lease(AccountLease("acct", "CLAUDE_CODE_OAUTH_TOKEN", Secret(value)))
    assert not find_leaks([value], cfg.to_dict(), repr(cfg), str(cfg), cfg.account)
    assert cfg.account is not None
    assert cfg.account.credential_kind == "oauth_token"


def test_result_text_and_json() -> None:
    assert AgentResult("hello", duration_ms=1).text == "hello"
    structured = AgentResult({"a": 1}, duration_ms=1)
    assert structured.text == ""
    assert structured.json() == {"a": 1}
    assert AgentResult('{"b": 2}', duration_ms=1).json() == {"b": 2}
    with pytest.raises(errors.SchemaValidation):
        AgentResult("not json", duration_ms=1).json()


def test_k8s_pvc_volume_validate() -> None:
    assert PvcVolume("", "/x").problem() == "pvc volume needs a non-empty claim_name"
    assert PvcVolume("c", "/x").problem() is None
