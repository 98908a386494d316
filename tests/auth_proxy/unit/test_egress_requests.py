"""The egress proxy's heads as values: strict parsing, the token, the head sent upstream,
and a grant's egress policy through the admin API body, the hub wire and the config."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import egress
from ironflow.auth_proxy import config, egress_requests, policy, tokens
from ironflow.errors import ConfigError
from ironflow.secrets import Secret

TOKEN = "ifap_" + "ab" * 32


def _head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_connect_head_gives_host_and_port() -> None:
    request = egress_requests.parse_head(_head("CONNECT PyPI.org:443 HTTP/1.1", "Host: pypi.org:443"))
    assert (request.method, request.host, request.port, request.tunnel) == ("CONNECT", "pypi.org", 443, True)
    v6 = egress_requests.parse_head(_head("CONNECT [2001:db8::1]:8443 HTTP/1.1"))
    assert (v6.host, v6.port) == ("2001:db8::1", 8443)


def test_an_absolute_form_head_gives_target_and_a_path_without_query() -> None:
    request = egress_requests.parse_head(_head("GET http://Example.com/a/b?token=x#f HTTP/1.1", "Accept: */*"))
    assert (request.host, request.port, request.target, request.path) == ("example.com", 80, "/a/b?token=x", "/a/b")
    assert egress_requests.parse_head(_head("GET http://0x7f.1:8080 HTTP/1.1")).host == "0x7f.1"
    assert egress_requests.parse_head(_head("GET http://[::ffff:127.0.0.1]/ HTTP/1.1")).host == "::ffff:127.0.0.1"


@pytest.mark.parametrize(
    "head",
    [
        _head("CONNECT pypi.org HTTP/1.1"),
        _head("CONNECT pypi.org:0 HTTP/1.1"),
        _head("CONNECT pypi.org:99999 HTTP/1.1"),
        _head("CONNECT pypi.org:" + "4" * 5000 + " HTTP/1.1"),  # past int()'s digit limit: still one line
        _head("CONNECT ::1:443 HTTP/1.1"),
        _head("GET /relative HTTP/1.1"),
        _head("GET https://pypi.org/ HTTP/1.1"),
        _head("GET http://user:pw@pypi.org/ HTTP/1.1"),
        _head("GET http://pypi.org:x/ HTTP/1.1"),
        _head("GET http://py pi.org/ HTTP/1.1"),
        _head("GET http://pypi.org/ HTTP/2"),
        _head("GET http://pypi.org/ HTTP/1.1", " folded: header"),
        _head("GET http://pypi.org/ HTTP/1.1", "X: a\x00b"),
        _head("POST http://pypi.org/ HTTP/1.1", "Content-Length: 1", "Transfer-Encoding: chunked"),
        _head("POST http://pypi.org/ HTTP/1.1", "Content-Length: 1", "Content-Length: 2"),
        _head("POST http://pypi.org/ HTTP/1.1", "Transfer-Encoding: gzip, chunked"),
        "GET http://pypi.org/ HTTP/1.1\r\nHost: é\r\n\r\n".encode(),
    ],
)
def test_a_malformed_head_is_refused(head: bytes) -> None:
    with pytest.raises(egress_requests.MalformedHead):
        egress_requests.parse_head(head)


@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_refused_as_malformed(data: bytes) -> None:
    with contextlib.suppress(egress_requests.MalformedHead):
        egress_requests.parse_head(data + b"\r\n\r\n")


@pytest.mark.parametrize(
    "value",
    [f"Bearer {TOKEN}", "Basic " + base64.b64encode(f"ironflow:{TOKEN}".encode()).decode()],
)
def test_the_token_comes_from_proxy_authorization_as_bearer_or_basic_password(value: str) -> None:
    request = egress_requests.parse_head(_head("CONNECT a.io:443 HTTP/1.1", f"Proxy-Authorization: {value}"))
    assert egress_requests.proxy_token(request) == TOKEN


def test_no_token_without_proxy_authorization() -> None:
    request = egress_requests.parse_head(_head("CONNECT a.io:443 HTTP/1.1", f"Authorization: Bearer {TOKEN}"))
    assert egress_requests.proxy_token(request) is None


def test_the_upstream_head_is_origin_form_without_proxy_or_hop_by_hop_headers() -> None:
    request = egress_requests.parse_head(
        _head(
            "POST http://pypi.org:8080/upload?x=1 HTTP/1.1",
            "Host: evil.example",
            f"Proxy-Authorization: Bearer {TOKEN}",
            "Connection: keep-alive, X-Drop",
            "X-Drop: 1",
            "Keep-Alive: 5",
            "Transfer-Encoding: chunked",
            "Content-Type: text/plain",
        )
    )
    head = egress_requests.origin_head(request).decode()
    assert head == (
        "POST /upload?x=1 HTTP/1.1\r\nHost: pypi.org:8080\r\nContent-Type: text/plain\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )


def test_the_proxys_answers_close_and_407_challenges() -> None:
    answer = egress_requests.answer(407, "no", egress_requests.AUTHENTICATE).decode()
    assert answer.startswith("HTTP/1.1 407 Proxy Authentication Required\r\n")
    assert 'Proxy-Authenticate: Basic realm="ironflow egress"' in answer
    assert "Connection: close" in answer
    assert egress_requests.answer(200) == b"HTTP/1.1 200 Connection established\r\n\r\n"


# --- a grant's egress policy --------------------------------------------------------------------

POLICY = egress.EgressPolicy(allow=(egress.parse_allow_host("pypi.org:443"),))
BODY = {
    "run_id": "r",
    "step": "s",
    "expires_at": 2_000,
    "credential": {"kind": "api_key", "value": "sk-ant-x"},
}


def test_a_token_request_carries_its_egress_policy() -> None:
    request = tokens.parse_token_request(json.dumps({**BODY, "egress": POLICY.to_json()}).encode(), 1_000)
    assert request.egress == POLICY
    assert tokens.parse_token_request(json.dumps(BODY).encode(), 1_000).egress is None


def test_a_bad_egress_policy_is_a_400_naming_it() -> None:
    with pytest.raises(tokens.InvalidTokenRequest, match="invalid egress policy"):
        tokens.parse_token_request(json.dumps({**BODY, "egress": ["pypi.org"]}).encode(), 1_000)


def test_a_grant_keeps_its_egress_policy_over_the_hub_wire() -> None:
    credential = tokens.ClaudeCredential("api_key", Secret("sk-ant-x"))
    grant = tokens.Grant("id", "r", "s", 2_000, credential, egress=POLICY)
    assert tokens.grant_from_wire(json.loads(json.dumps(tokens.grant_to_wire(grant)))) == grant
    bare = tokens.Grant("id", "r", "s", 2_000, credential)
    assert tokens.grant_from_wire(tokens.grant_to_wire(bare)).egress is None


def test_an_egress_only_grant_crosses_the_hub_wire_and_the_admin_api_only_with_a_policy() -> None:
    """A pod's egress-only token is issued through the admin API (k8s); without a policy it would reach nothing."""
    grant = tokens.Grant("id", "r", "s", 2_000, tokens.EgressCredential(), egress=POLICY)
    assert tokens.grant_from_wire(json.loads(json.dumps(tokens.grant_to_wire(grant)))) == grant
    body = {**BODY, "credential": {"kind": "egress"}, "egress": POLICY.to_json()}
    assert tokens.parse_token_request(json.dumps(body).encode(), 1_000).credential == tokens.EgressCredential()
    with pytest.raises(tokens.InvalidTokenRequest, match="an egress-only credential needs an egress policy"):
        tokens.parse_token_request(json.dumps({**body, "egress": None}).encode(), 1_000)


def test_an_egress_only_token_is_refused_on_both_relays() -> None:
    """Rows 5b and S1b: it carries no credential to inject."""
    grant = tokens.Grant("id", "r", "s", 2_000, tokens.EgressCredential(), egress=POLICY)
    assert policy.check_claude_request("POST", "/v1/messages", grant) is policy.EGRESS_TOKEN_REFUSED
    refusal, host, _ = policy.check_secret_request("GET", "/r/github.com/x", grant)
    assert (refusal, host) == (policy.EGRESS_TOKEN_REFUSED, "github.com")
    assert policy.EGRESS_TOKEN_REFUSED.status == 403


def test_the_egress_listener_and_limits_come_from_the_environment() -> None:
    env = {config.ADMIN_KEY_ENV: "k" * 40}
    assert not config.AuthProxyConfig.from_env(env).egress_enabled
    configured = config.AuthProxyConfig.from_env(
        {
            **env,
            config.EGRESS_LISTEN_ENV: "127.0.0.1:3128",
            config.EGRESS_MAX_TUNNELS_ENV: "4",
            config.EGRESS_MAX_BYTES_ENV: "1000",
            config.EGRESS_IDLE_TIMEOUT_ENV: "2.5",
        }
    )
    assert (configured.egress_host, configured.egress_port) == ("127.0.0.1", 3128)
    assert (configured.egress_max_tunnels, configured.egress_max_bytes, configured.egress_idle_timeout_s) == (
        4,
        1000,
        2.5,
    )
    with pytest.raises(ConfigError, match=config.EGRESS_LISTEN_ENV):
        config.AuthProxyConfig.from_env({**env, config.EGRESS_LISTEN_ENV: "3128"})
    with pytest.raises(ConfigError, match=config.EGRESS_MAX_TUNNELS_ENV):
        config.AuthProxyConfig.from_env({**env, config.EGRESS_MAX_TUNNELS_ENV: "-1"})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["allow", "deny", "host", "ports", "methods", "path_prefix", "addresses", "profiles", "x"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(_JSON)
def test_any_egress_value_in_a_token_request_is_a_policy_or_a_400(raw: object) -> None:
    body = json.dumps({**BODY, "egress": raw}).encode()
    refused = None
    try:
        request = tokens.parse_token_request(body, 1_000)
    except tokens.InvalidTokenRequest as exc:
        refused = exc.message
    if refused is not None:
        assert refused.startswith("invalid egress policy")
    else:
        assert request.egress is None or isinstance(request.egress, egress.EgressPolicy)
