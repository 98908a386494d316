"""The egress decision: deny beats allow, the fixed deny set no wildcard opens, names and paths as servers read them."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.egress import EgressPolicy, InvalidEgressPolicy, Rule, addresses, decide, decide_address, parse_allow_host


def _policy(*allow: str, deny: tuple[str, ...] = ()) -> EgressPolicy:
    return EgressPolicy(allow=tuple(map(parse_allow_host, allow)), deny=tuple(map(parse_allow_host, deny)))


def test_the_default_policy_denies_everything() -> None:
    found = decide(EgressPolicy(), "pypi.org", 443)
    assert not found.allowed
    assert found.rule is None
    assert found.reason == "no rule allows pypi.org:443"


def test_an_allow_rule_allows_and_names_itself() -> None:
    found = decide(_policy("pypi.org:443"), "pypi.org", 443)
    assert found.allowed
    assert found.rule == "allow pypi.org:443"
    assert found.reason == "allowed by allow pypi.org:443"


def test_deny_beats_allow_whatever_the_order() -> None:
    policy = _policy("*", "evil.example.com", deny=("evil.example.com",))
    found = decide(policy, "evil.example.com", 443)
    assert (found.allowed, found.rule) == (False, "deny evil.example.com:443,80")
    assert decide(policy, "good.example.com", 443).allowed


def test_a_suffix_deny_beats_an_exact_allow() -> None:
    found = decide(_policy("api.github.com:443", deny=("*.github.com",)), "api.github.com", 443)
    assert not found.allowed
    assert found.rule == "deny *.github.com:443,80"


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "127.0.0.1",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
        "127.1",
        "[::ffff:127.0.0.1]",
        "::ffff:7f00:1",
        "2852039166",
        "10.0.0.1",
        "100.64.0.1",
        "[::1]",
        "[fd00::1]",
        "[fe80::1]",
        "0.0.0.0",
        "0",
    ],
)
def test_star_never_opens_the_fixed_deny_set(host: str) -> None:
    found = decide(_policy("*:*"), host, 80)
    assert not found.allowed
    assert found.rule is None
    assert "only a rule naming it opens it" in found.reason


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST.", "api.localhost"])
def test_star_never_opens_localhost_by_name(host: str) -> None:
    found = decide(_policy("*:*"), host, 80)
    assert not found.allowed
    assert found.reason.endswith("is loopback by name: only a rule naming it opens it")
    assert decide(_policy("*:*", "localhost:80", "*.localhost:80"), host, 80).allowed


def test_the_metadata_address_is_named_in_the_reason() -> None:
    found = decide(_policy("*"), "2852039166", 80)
    assert found.reason == "169.254.169.254 is link-local (metadata): only a rule naming it opens it"


def test_star_allows_a_public_address_literal() -> None:
    assert decide(_policy("*"), "8.8.8.8", 443).allowed


@pytest.mark.parametrize(
    ("rule", "host"),
    [
        ("127.0.0.1:8080", "2130706433"),
        ("127.0.0.0/8:8080", "0x7f.1"),
        ("[::1]:8080", "::1"),
        ("10.0.0.0/8:8080", "10.1.2.3"),
        ("127.0.0.1:8080", "[::ffff:127.0.0.1]"),
        ("[fd00::/8]:8080", "[fd12::5]"),
    ],
)
def test_an_ip_or_cidr_rule_opens_the_fixed_deny_set_it_names(rule: str, host: str) -> None:
    policy = _policy(rule)
    assert decide(policy, host, 8080).allowed
    assert not decide(policy, host, 8081).allowed


def test_a_cidr_rule_opens_only_its_range() -> None:
    policy = _policy("10.1.0.0/16:*")
    assert decide(policy, "10.1.200.3", 5432).allowed
    assert not decide(policy, "10.2.0.1", 5432).allowed


def test_a_deny_cidr_beats_an_allow_cidr_for_an_ip_literal() -> None:
    policy = _policy("10.0.0.0/8:*", deny=("10.0.0.5:*",))
    assert not decide(policy, "10.0.0.5", 80).allowed
    assert decide(policy, "10.0.0.6", 80).allowed


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("api.github.com", True),
        ("a.b.github.com", True),
        ("github.com", False),
        ("evilgithub.com", False),
        ("github.com.evil.com", False),
        ("API.GitHub.COM.", True),
    ],
)
def test_a_suffix_matches_strict_subdomains_only(host: str, allowed: bool) -> None:
    assert decide(_policy("*.github.com:443"), host, 443).allowed is allowed


@pytest.mark.parametrize("host", ["PyPI.org", "pypi.org.", "PYPI.ORG."])
def test_names_match_without_case_or_trailing_dot(host: str) -> None:
    assert decide(_policy("pypi.org:443"), host, 443).allowed


def test_a_rule_is_normalised_too() -> None:
    assert parse_allow_host("PyPI.Org.:443").host == "pypi.org"
    assert parse_allow_host("0x7f.1:80").host == "127.0.0.1"
    assert parse_allow_host("[::ffff:10.0.0.1]:80").host == "10.0.0.1"


@pytest.mark.parametrize(
    "host", ["bücher.de", "git hub.com", "github.com/x", "a..b", "-a.com", "1.2.3.999", "*", "*.a.com", "", "a" * 300]
)
def test_garbage_and_idna_hosts_are_refused_in_one_line(host: str) -> None:
    found = decide(_policy("*:*"), host, 443)
    assert not found.allowed
    assert found.reason.startswith("refused host ")
    assert "\n" not in found.reason


@pytest.mark.parametrize(
    "text",
    ["bücher.de", "github.com:0", "github.com:65536", "github.com:x", "10.0.0.1/8", "[::1", "a..b", "x:80@bad", ""],
)
def test_bad_allow_host_is_one_line(text: str) -> None:
    with pytest.raises(InvalidEgressPolicy) as caught:
        parse_allow_host(text)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_allow_host_forms() -> None:
    assert parse_allow_host("github.com") == Rule("github.com", ports=(443, 80))
    assert parse_allow_host("github.com:*") == Rule("github.com", ports=None)
    assert parse_allow_host("[::1]:8443") == Rule("::1", ports=(8443,))
    assert parse_allow_host("fd00::/8") == Rule("fd00::/8")
    assert parse_allow_host("svc.ns:80@10.96.0.0/12") == Rule(
        "svc.ns", ports=(80,), addresses=(ipaddress.IPv4Network("10.96.0.0/12"),)
    )


def test_ports_default_to_443_and_80_and_star_is_any() -> None:
    policy = _policy("a.example.com", "b.example.com:*")
    assert [decide(policy, "a.example.com", p).allowed for p in (443, 80, 22)] == [True, True, False]
    assert decide(policy, "b.example.com", 22).allowed


def test_method_and_path_scope_plain_http() -> None:
    policy = EgressPolicy(allow=(Rule("pypi.org", ports=(80,), methods=("GET",), path_prefix="/simple/"),))
    assert decide(policy, "pypi.org", 80, method="GET", path="/simple/requests/?x=1").allowed
    assert not decide(policy, "pypi.org", 80, method="POST", path="/simple/requests/").allowed
    assert not decide(policy, "pypi.org", 80, method="GET", path="/admin").allowed
    assert decide(policy, "pypi.org", 80, method="GET", path="/%73imple/x").allowed  # %73 is 's'


@pytest.mark.parametrize("path", ["/simple/../admin", "/simple/%2e%2e/admin", "/simple/%2E./x", "/simple%2Fx", "/a\\b"])
def test_an_ambiguous_path_opens_no_path_rule_and_hits_every_path_deny(path: str) -> None:
    allow = EgressPolicy(allow=(Rule("pypi.org", path_prefix="/simple/"),))
    assert not decide(allow, "pypi.org", 80, method="GET", path=path).allowed
    deny = EgressPolicy(allow=(Rule("pypi.org"),), deny=(Rule("pypi.org", path_prefix="/admin"),))
    assert not decide(deny, "pypi.org", 80, method="GET", path=path).allowed
    assert decide(deny, "pypi.org", 80, method="GET", path="/simple/x").allowed


def test_a_deny_path_cannot_be_dodged_by_escaping_letters() -> None:
    policy = EgressPolicy(allow=(Rule("h.example.com"),), deny=(Rule("h.example.com", path_prefix="/admin"),))
    assert not decide(policy, "h.example.com", 80, method="GET", path="/%61dmin/users").allowed


def test_a_scoped_allow_never_opens_a_connect_tunnel() -> None:
    policy = EgressPolicy(allow=(Rule("pypi.org", ports=(443,), methods=("GET",)),))
    found = decide(policy, "pypi.org", 443)
    assert not found.allowed
    assert "scoped by method or path, which a CONNECT tunnel does not show" in found.reason


def test_a_scoped_deny_refuses_every_connect_to_its_host() -> None:
    policy = EgressPolicy(allow=(Rule("api.example.com"),), deny=(Rule("api.example.com", methods=("DELETE",)),))
    assert not decide(policy, "api.example.com", 443).allowed
    assert decide(policy, "api.example.com", 80, method="GET", path="/").allowed
    assert not decide(policy, "api.example.com", 80, method="delete", path="/").allowed


def test_the_first_matching_allow_rule_is_the_one_named() -> None:
    policy = _policy("*.example.com:443", "a.example.com:443", "*:443")
    assert decide(policy, "a.example.com", 443).rule == "allow *.example.com:443"
    assert decide(policy, "other.org", 443).rule == "allow *:443"


@pytest.mark.parametrize("port", [0, -1, 65536])
def test_an_impossible_port_is_refused(port: int) -> None:
    assert not decide(_policy("*:*"), "pypi.org", port).allowed


def test_after_resolution_a_private_answer_is_refused_even_under_star() -> None:
    """DNS rebinding: the name passed, the address it resolved to does not."""
    policy = _policy("*")
    assert decide(policy, "rebind.example.com", 443).allowed
    found = decide_address(policy, "rebind.example.com", 443, ipaddress.ip_address("127.0.0.1"))
    assert not found.allowed
    assert found.reason == "rebind.example.com resolved to 127.0.0.1, which is loopback: only a rule naming it opens it"
    assert not decide_address(policy, "x.example.com", 443, ipaddress.ip_address("::ffff:169.254.169.254")).allowed
    assert decide_address(policy, "x.example.com", 443, ipaddress.ip_address("93.184.215.14")).allowed


def test_after_resolution_addresses_open_a_name_into_its_range_only() -> None:
    policy = _policy("svc.ns:80@10.96.0.0/12", "*")
    assert decide_address(policy, "svc.ns", 80, ipaddress.ip_address("10.96.0.10")).allowed
    assert not decide_address(policy, "svc.ns", 80, ipaddress.ip_address("10.0.0.10")).allowed
    assert not decide_address(policy, "svc.ns", 443, ipaddress.ip_address("10.96.0.10")).allowed
    assert not decide_address(policy, "other.ns", 80, ipaddress.ip_address("10.96.0.10")).allowed


def test_after_resolution_a_cidr_rule_opens_its_range_for_any_name() -> None:
    policy = _policy("*", "10.0.0.0/8:5432")
    assert decide_address(policy, "db.internal", 5432, ipaddress.ip_address("10.1.1.1")).allowed
    assert not decide_address(policy, "db.internal", 5433, ipaddress.ip_address("10.1.1.1")).allowed


def test_after_resolution_a_deny_cidr_refuses_a_public_address() -> None:
    policy = _policy("*", deny=("203.0.112.0/24:*",))
    found = decide_address(policy, "a.example.com", 443, ipaddress.ip_address("203.0.112.9"))
    assert (found.allowed, found.rule) == (False, "deny 203.0.112.0/24:*")


def test_merged_keeps_each_rule_once_and_both_lists() -> None:
    one = _policy("a.example.com", deny=("x.example.com",))
    two = _policy("a.example.com", "b.example.com")
    merged = one.merged(two)
    assert [r.host for r in merged.allow] == ["a.example.com", "b.example.com"]
    assert [r.host for r in merged.deny] == ["x.example.com"]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"host": "10.0.0.0/8", "addresses": (ipaddress.IPv4Network("10.0.0.0/8"),)}, "'addresses' belongs"),
        ({"host": "a.com", "methods": ("G ET",)}, "invalid methods"),
        ({"host": "a.com", "path_prefix": "simple"}, "invalid path_prefix"),
        ({"host": "a.com", "path_prefix": "/a/../b"}, "invalid path_prefix"),
        ({"host": "a.com", "ports": ()}, "invalid ports"),
        ({"host": "::ffff:10.0.0.0/104"}, "write the IPv4 range"),
    ],
)
def test_a_rule_that_can_never_work_is_refused(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(InvalidEgressPolicy, match=fragment):
        Rule(**kwargs)  # type: ignore[arg-type]


_FIXED_V4 = st.sampled_from([n for n, _ in addresses.FIXED_DENY_RANGES if n.version == 4]).flatmap(
    lambda n: st.integers(int(n.network_address), int(n.broadcast_address)).map(ipaddress.IPv4Address)
)
_SPELLINGS = st.sampled_from([str, lambda a: str(int(a)), lambda a: hex(int(a)), lambda a: f"[::ffff:{a}]"])


@given(_FIXED_V4, _SPELLINGS, st.integers(1, 65535))
def test_no_spelling_of_a_fixed_deny_address_passes_star(address: ipaddress.IPv4Address, spell: Any, port: int) -> None:
    assert not decide(_policy("*:*", "*.example.com:*"), spell(address), port).allowed
    assert not decide_address(_policy("*:*"), "any.example.com", port, address).allowed


@given(
    st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,3}\.example\.com", fullmatch=True),
    st.sampled_from(["*", "*.example.com", "{host}"]),
    st.sampled_from(["*", "*.example.com", "{host}"]),
)
def test_a_matching_deny_rule_always_wins(host: str, allow: str, deny: str) -> None:
    policy = _policy(allow.format(host=host) + ":443", deny=(deny.format(host=host) + ":443",))
    found = decide(policy, host, 443)
    assert not found.allowed
    assert found.rule is not None
    assert found.rule.startswith("deny ")
