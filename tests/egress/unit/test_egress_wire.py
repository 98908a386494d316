"""The policy's wire form (files' and token requests' ``egress:``) and the named profiles."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.egress import PROFILES, EgressPolicy, InvalidEgressPolicy, Rule, decide, options, profile, profiles

_NAMES = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\.[a-z]{2,6}){1,3}", fullmatch=True)
_NETWORKS = st.one_of(
    st.builds(lambda n, p: ipaddress.IPv4Network((n, p), strict=False), st.integers(0, 2**32 - 1), st.integers(0, 32)),
    st.builds(
        lambda n, p: ipaddress.IPv6Network((n, p), strict=False), st.integers(2**125, 2**128 - 1), st.integers(8, 128)
    ),
)
_HOSTS = st.one_of(_NAMES, _NAMES.map(lambda n: "*." + n), st.just("*"), _NETWORKS.map(str))


@st.composite
def _rules(draw: st.DrawFn) -> Rule:
    host = draw(_HOSTS)
    is_net = "/" in host
    return Rule(
        host=host,
        ports=draw(st.one_of(st.none(), st.lists(st.integers(1, 65535), min_size=1, max_size=3).map(tuple))),
        methods=draw(st.one_of(st.none(), st.lists(st.sampled_from(["GET", "HEAD", "POST"]), min_size=1).map(tuple))),
        path_prefix=draw(st.one_of(st.none(), st.from_regex(r"/[a-z0-9/_-]{0,12}", fullmatch=True))),
        addresses=() if is_net else tuple(draw(st.lists(_NETWORKS, max_size=2))),
    )


_POLICIES = st.builds(
    EgressPolicy, allow=st.lists(_rules(), max_size=5).map(tuple), deny=st.lists(_rules(), max_size=3).map(tuple)
)


@given(_POLICIES)
def test_to_json_and_from_json_round_trip(policy: EgressPolicy) -> None:
    wire = json.loads(json.dumps(policy.to_json()))
    assert EgressPolicy.from_json(wire) == policy


@given(_POLICIES)
def test_the_label_of_an_unscoped_rule_reads_back_as_the_same_rule(policy: EgressPolicy) -> None:
    for rule in policy.allow:
        if not rule.scoped and (rule.ports is None or len(rule.ports) == 1):
            assert Rule.from_json(rule.label()) == rule


def test_the_wire_form_reads_strings_mappings_and_profiles() -> None:
    policy = profiles.from_json(
        {
            "allow": [
                "*.example.com:443",
                {"host": "pypi.org", "ports": [80], "methods": ["get"], "path_prefix": "/simple/"},
                {"host": "svc.ns", "ports": 8080, "addresses": ["10.96.0.0/12"]},
                {"host": "any.example.org", "ports": "*"},
            ],
            "deny": ["bad.example.com"],
            "profiles": ["npm"],
        }
    )
    assert policy.allow[0] == Rule("registry.npmjs.org", ports=(443,))
    assert policy.allow[2] == Rule("pypi.org", ports=(80,), methods=("GET",), path_prefix="/simple/")
    assert policy.allow[3].addresses == (ipaddress.IPv4Network("10.96.0.0/12"),)
    assert policy.allow[4].ports is None
    assert policy.deny == (Rule("bad.example.com"),)
    assert not decide(policy, "bad.example.com", 443).allowed
    assert decide(policy, "registry.npmjs.org", 443).allowed


def test_no_policy_is_the_deny_all_default() -> None:
    assert EgressPolicy.from_json(None) == EgressPolicy() == EgressPolicy.from_json({})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "an egress policy is a mapping of allow, deny, profiles, not list"),
        ({"alow": []}, "unknown egress key 'alow' (known: allow, deny, profiles)"),
        ({"allow": "pypi.org"}, "egress 'allow' is a list of rules"),
        ({"allow": [3]}, "egress allow[0]: an egress rule is a string or a mapping, not int"),
        ({"allow": ["ok.com", {"host": "a.com", "port": 1}]}, "egress allow[1]: unknown egress rule key 'port'"),
        ({"deny": [{"host": "a.com", "ports": [0]}]}, "egress deny[0]: invalid ports [0] for a.com"),
        ({"allow": [{"host": "a.com", "ports": ["443"]}]}, "egress allow[0]: invalid ports ['443'] for a.com"),
        ({"allow": [{"ports": [443]}]}, "egress allow[0]: an egress rule needs a host"),
        ({"allow": [{"host": "a.com", "addresses": ["10.0.0.1/8"]}]}, "egress allow[0]: invalid address range"),
        ({"profiles": ["githb"]}, "unknown egress profile 'githb'; did you mean 'github'?"),
        (
            {"profiles": ["nothing-near"]},
            "unknown egress profile 'nothing-near'; known: anthropic-only, github, gitlab,",
        ),
        ({"profiles": "pypi"}, "egress 'profiles' is a list of profile names"),
    ],
)
def test_a_bad_wire_form_is_one_line_naming_the_entry(raw: Any, message: str) -> None:
    with pytest.raises(InvalidEgressPolicy) as caught:
        profiles.from_json(raw)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_the_bare_wire_form_knows_no_profile_names() -> None:
    """What crosses the wire is expanded (to_json never writes profiles): a name there is refused, never ignored."""
    with pytest.raises(InvalidEgressPolicy, match="egress profile 'pypi' is not read here: send its rules"):
        EgressPolicy.from_json({"profiles": ["pypi"]})
    assert "profiles" not in profiles.from_json({"profiles": ["pypi"]}).to_json()


def test_profiles_open_their_hosts_on_443_only() -> None:
    assert decide(profile("pypi"), "files.pythonhosted.org", 443).allowed
    assert not decide(profile("pypi"), "files.pythonhosted.org", 80).allowed
    assert not decide(profile("pypi"), "evil.pythonhosted.org", 443).allowed
    assert decide(profile("github"), "codeload.github.com", 443).allowed
    assert decide(profile("go"), "proxy.golang.org", 443).allowed
    assert decide(profile("npm"), "registry.npmjs.org", 443).allowed
    assert decide(profile("gitlab"), "gitlab.com", 443).allowed
    for name, policy in PROFILES.items():
        assert all(rule.ports == (443,) and rule.kind == "exact" for rule in policy.allow), name


def test_anthropic_only_is_todays_deny_all() -> None:
    assert profile("anthropic-only") == EgressPolicy()


def test_a_files_own_profile_is_found_and_may_replace_a_builtin() -> None:
    mirror = EgressPolicy(allow=(Rule("pypi.mirror.internal", ports=(443,)),))
    assert profile("pypi", {"pypi": mirror}) == mirror
    assert profile("mine", {"mine": mirror}) == mirror
    with pytest.raises(InvalidEgressPolicy, match=r"known: anthropic-only, github, gitlab, go, mine, npm, pypi$"):
        profile("unheard-of", {"mine": mirror})
    assert EgressPolicy.from_json({"profiles": ["mine"]}, profiles={"mine": mirror}) == mirror


def test_a_files_egress_may_name_its_own_profiles_and_those_the_builtins() -> None:
    found, own = options.file_policy(
        {"profiles": ["mirror"], "allow": ["extra.example.com:443"]},
        {"mirror": {"allow": ["pypi.mirror.internal:443@10.0.0.0/8"], "profiles": ["npm"]}},
        source="provider file 'p.yaml'",
    )
    assert [r.host for r in found.allow] == ["registry.npmjs.org", "pypi.mirror.internal", "extra.example.com"]
    assert set(own) == {"mirror"}
    assert options.file_policy(None, source="f") == (EgressPolicy(), {})


@pytest.mark.parametrize(
    ("egress", "own", "message"),
    [
        (None, ["x"], "provider file 'p.yaml': egress_profiles is a mapping of profile name to policy"),
        (None, {"Bad_Name": {}}, "provider file 'p.yaml': egress_profiles: invalid profile name 'Bad_Name'"),
        (
            None,
            {"a": {"profiles": ["b"]}, "b": {}},
            "provider file 'p.yaml': egress_profiles.a: unknown egress profile 'b'",
        ),
        (None, {"a": {"allow": [1]}}, "provider file 'p.yaml': egress_profiles.a: egress allow[0]: an egress rule is"),
        ({"allow": ["a..b"]}, None, "provider file 'p.yaml': egress: egress allow[0]: invalid egress host 'a..b'"),
    ],
)
def test_a_bad_file_egress_is_one_line_naming_file_and_key(egress: Any, own: Any, message: str) -> None:
    with pytest.raises(InvalidEgressPolicy) as caught:
        options.file_policy(egress, own, source="provider file 'p.yaml'")
    assert str(caught.value).startswith(message)
