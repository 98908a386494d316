"""The proxy's security policy (pure): token extraction, paths, methods, limits; header rewriting (header_policy).

Counterparts of the reference's ``policy.rs``, plus properties over generated inputs.
"""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from ironflow.auth_proxy import header_policy, policy, tokens
from ironflow.secrets import Secret

OAUTH = tokens.ClaudeCredential("oauth_token", Secret("sk-ant-oat01-real"))
API_KEY = tokens.ClaudeCredential("api_key", Secret("sk-ant-api03-real"))


def _grant(credential: tokens.Credential) -> tokens.Grant:
    return tokens.Grant(id="a" * 64, run_id="run", step="step", expires_at=2**40, credential=credential)


def _secret(injection: tokens.Injection, hosts: tuple[str, ...] = ("gitlab.example.com",)) -> tokens.SecretCredential:
    return tokens.SecretCredential("gitlab", Secret("glpat-real"), injection, hosts)


def _headers(**values: str) -> CIMultiDict[str]:
    return CIMultiDict({k.replace("_", "-"): v for k, v in values.items()})


def test_bearer_and_x_api_key_extraction() -> None:
    """Bearer (any scheme case, trimmed) wins over x-api-key; x-api-key alone works."""
    assert policy.extract_opaque_token(_headers(authorization="bearer  ifap_a ", x_api_key="ifap_b")) == "ifap_a"
    assert policy.extract_opaque_token(_headers(x_api_key=" ifap_b ")) == "ifap_b"


def test_missing_or_empty_auth_is_none() -> None:
    """No header, an empty Bearer or an unknown scheme carries no token."""
    assert policy.extract_opaque_token(_headers()) is None
    assert policy.extract_opaque_token(_headers(authorization="Bearer   ")) is None
    assert policy.extract_opaque_token(_headers(authorization="Digest ifap_x", x_api_key="")) is None


def test_private_token_is_extracted() -> None:
    assert policy.extract_opaque_token(_headers(private_token="ifap_p")) == "ifap_p"


def test_basic_password_is_extracted() -> None:
    """Git sends the token as the password of Basic auth."""
    encoded = base64.b64encode(b"oauth2:ifap_basic").decode()
    assert policy.extract_opaque_token(_headers(authorization=f"Basic {encoded}")) == "ifap_basic"
    assert policy.extract_opaque_token(_headers(authorization="Basic !!notbase64")) is None


def test_allowed_paths() -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/v1/a.b-c_d/"):
        assert policy.is_allowed_path(path), path


def test_refused_paths() -> None:
    """Outside /v1/, percent-encoding, //, .. segments and odd characters are refused."""
    for path in ("/", "/v1", "/v2/messages", "/admin/v1/tokens", "/v1/../admin", "/v1//x", "/v1/a%2e%2e",
                 "/v1/a b", "/v1/é", "/v1/x/..", "/r/github.com/x"):  # fmt: skip
        assert not policy.is_allowed_path(path), path


def test_allowed_methods() -> None:
    """GET and POST only; a PUT with a valid token is a 405, a path outside /v1/ a 403 first."""
    grant = _grant(OAUTH)
    assert policy.check_claude_request("GET", "/v1/models", grant) is None
    assert policy.check_claude_request("POST", "/v1/messages", grant) is None
    assert policy.check_claude_request("PUT", "/v1/messages", grant) is policy.METHOD_REFUSED
    assert policy.check_claude_request("PUT", "/v2/x", grant) is policy.ANTHROPIC_PATH_REFUSED


def test_absolute_form_and_connect_are_refused_first() -> None:
    assert policy.check_target("GET", "http://evil.example/v1/messages") is policy.OTHER_HOST_REFUSED
    assert policy.check_target("CONNECT", "evil.example:443") is policy.OTHER_HOST_REFUSED
    assert policy.check_target("POST", "/v1/messages?beta=true") is None


def test_upstream_headers_oauth_sets_bearer_and_beta() -> None:
    out = dict(header_policy.upstream_headers([("Authorization", "Bearer ifap_x"), ("content-type", "json")], OAUTH))
    assert out["authorization"] == "Bearer sk-ant-oat01-real"
    assert out["anthropic-beta"] == "oauth-2025-04-20"
    assert out["content-type"] == "json"


def test_upstream_headers_appends_existing_beta_once() -> None:
    out = header_policy.upstream_headers([("anthropic-beta", "claude-code-20250219")], OAUTH)
    assert [v for k, v in out if k == "anthropic-beta"] == ["claude-code-20250219,oauth-2025-04-20"]
    out = header_policy.upstream_headers([("anthropic-beta", "oauth-2025-04-20, other")], OAUTH)
    assert [v for k, v in out if k == "anthropic-beta"] == ["oauth-2025-04-20, other"]
    out = header_policy.upstream_headers([("anthropic-beta", "a"), ("Anthropic-Beta", "b")], OAUTH)
    assert [v for k, v in out if k.lower() == "anthropic-beta"] == ["a,b,oauth-2025-04-20"]


def test_upstream_headers_api_key_sets_x_api_key_and_drops_authorization() -> None:
    out = header_policy.upstream_headers([("Authorization", "Bearer ifap_x"), ("anthropic-beta", "b1")], API_KEY)
    names = {k.lower() for k, _ in out}
    assert "authorization" not in names
    assert dict(out)["x-api-key"] == "sk-ant-api03-real"
    assert dict(out)["anthropic-beta"] == "b1"


def test_upstream_headers_drops_opaque_token_and_hop_by_hop() -> None:
    incoming = [(name, "ifap_secret") for name in ("x-api-key", "private-token", "cookie", "host", "content-length",
                                                   "accept-encoding", *header_policy.HOP_BY_HOP)]  # fmt: skip
    for credential in (OAUTH, API_KEY):
        out = header_policy.upstream_headers(incoming, credential)
        assert all("ifap_secret" not in value for _, value in out)


def test_downstream_headers_keeps_ratelimit_headers() -> None:
    upstream = [
        ("content-type", "text/event-stream"),
        ("request-id", "req_1"),
        ("anthropic-ratelimit-unified-status", "allowed"),
        ("anthropic-ratelimit-unified-5h-utilization", "0.2"),
        ("content-length", "12"),
        ("transfer-encoding", "chunked"),
        ("connection", "close"),
    ]
    out = dict(header_policy.downstream_headers(upstream))
    assert set(out) == {
        "content-type",
        "request-id",
        "anthropic-ratelimit-unified-status",
        "anthropic-ratelimit-unified-5h-utilization",
    }


def test_error_body_has_anthropic_shape() -> None:
    body = json.loads(policy.error_body("permission_error", "nope"))
    assert body == {"type": "error", "error": {"type": "permission_error", "message": "nope"}}


def test_relay_paths() -> None:
    """Secret relay: /r/<host>/<path> splits; .., //, % and odd characters are refused."""
    assert policy.split_secret_target("/r/gitlab.example.com/group/repo.git/info/refs") == (
        "gitlab.example.com",
        "/group/repo.git/info/refs",
    )
    assert policy.split_secret_target("/r/localhost/x") is None
    assert policy.split_secret_target("/r/10.0.0.1/x") is None
    for path in ("/a/../b", "/a//b", "/a%2Fb", "/a b"):
        assert not policy.is_relay_path_allowed(path), path
    assert policy.is_relay_path_allowed("/api/v4/projects")


def test_relay_methods() -> None:
    grant = _grant(_secret(tokens.Injection("private_token")))
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        assert policy.check_secret_request(method, "/r/gitlab.example.com/api", grant)[0] is None
    assert policy.check_secret_request("OPTIONS", "/r/gitlab.example.com/api", grant)[0] is policy.SECRET_METHOD_REFUSED
    assert policy.check_secret_request("GET", "/r/github.com/api", grant)[0] is policy.SECRET_HOST_REFUSED
    assert policy.check_secret_request("GET", "/r/x/api", _grant(OAUTH))[0] is policy.CLAUDE_TOKEN_ON_SECRET_RELAY


def test_wildcard_hosts_match_strict_subdomains_only() -> None:
    grant = _grant(_secret(tokens.Injection("bearer"), ("*.example.com",)))
    assert policy.check_secret_request("GET", "/r/git.example.com/x", grant)[0] is None
    assert policy.check_secret_request("GET", "/r/example.com/x", grant)[0] is policy.SECRET_HOST_REFUSED
    assert policy.check_secret_request("GET", "/r/evilexample.com/x", grant)[0] is policy.SECRET_HOST_REFUSED


def _secret_out(injection: tokens.Injection) -> dict[str, str]:
    incoming = [("Authorization", "Bearer ifap_pod"), ("Private-Token", "ifap_pod"), ("accept", "*/*")]
    return {k.lower(): v for k, v in header_policy.secret_headers(incoming, _secret(injection))}


def test_secret_headers_bearer() -> None:
    out = _secret_out(tokens.Injection("bearer"))
    assert out["authorization"] == "Bearer glpat-real"
    assert "private-token" not in out


def test_secret_headers_private_token() -> None:
    out = _secret_out(tokens.Injection("private_token"))
    assert out["private-token"] == "glpat-real"
    assert "authorization" not in out


def test_secret_headers_x_api_key() -> None:
    assert _secret_out(tokens.Injection("x_api_key"))["x-api-key"] == "glpat-real"


def test_secret_headers_custom_header() -> None:
    out = _secret_out(tokens.Injection("header", header="X-Gitea-Token"))
    assert out["x-gitea-token"] == "glpat-real"
    assert out["accept"] == "*/*"


def test_secret_headers_basic() -> None:
    out = _secret_out(tokens.Injection("basic", username="oauth2"))
    assert out["authorization"] == "Basic " + base64.b64encode(b"oauth2:glpat-real").decode()


def test_limits_refuse_model_then_spent_counters() -> None:
    limits = tokens.Limits(models=("claude-haiku",), max_requests=2, max_output_tokens=100)
    refusal = policy.check_limits(limits, requests_used=0, output_tokens_used=0, model="claude-opus")
    assert refusal is not None
    assert refusal.status == 403
    assert policy.check_limits(limits, requests_used=1, output_tokens_used=99, model="claude-haiku") is None
    spent = policy.check_limits(limits, requests_used=2, output_tokens_used=0, model="claude-haiku")
    assert spent is not None
    assert (spent.status, spent.kind) == (429, "rate_limit_error")
    spent = policy.check_limits(limits, requests_used=0, output_tokens_used=100, model="claude-haiku")
    assert spent is not None
    assert spent.status == 429


# --- properties ---------------------------------------------------------------------------

_path_chars = st.sampled_from([*list("abcXYZ019/_.-%~ :@?#é\\"), "..", "//", "%2e", "v1", "/v1/"])


@given(st.lists(_path_chars, max_size=12).map("".join))
def test_allowed_paths_are_always_plain_api_paths(path: str) -> None:
    """Whatever the input, an allowed path is /v1/…, plain ASCII, without // or .. segments."""
    if policy.is_allowed_path(path):
        assert path.startswith("/v1/")
        assert "//" not in path
        assert "%" not in path
        assert ".." not in path.split("/")
        assert all(c.isascii() and (c.isalnum() or c in "/_.-") for c in path)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "Authorization",
                "X-Api-Key",
                "private-token",
                "Cookie",
                "Host",
                "anthropic-beta",
                "Connection",
                "Proxy-Authorization",
                "content-type",
                "x-custom",
            ]
        ),
        st.text(alphabet="abcdefghij_ ,-", min_size=0, max_size=12).map(lambda s: "ifap_" + s),
    ),
    st.sampled_from([OAUTH, API_KEY]),
)
def test_upstream_headers_never_forward_the_pod_credential_headers(
    headers: dict[str, str], credential: tokens.ClaudeCredential
) -> None:
    """The pod's credential, cookie, host and hop-by-hop headers never go upstream; exactly one
    credential header, carrying the real credential, does."""
    out = header_policy.upstream_headers(headers.items(), credential)
    names = [k.lower() for k, _ in out]
    for name, value in out:
        if name.lower() in ("authorization", "x-api-key"):
            assert credential.value.reveal() in value
        assert name.lower() not in {"cookie", "host", "private-token", "connection", "proxy-authorization"}
    assert names.count("authorization") + names.count("x-api-key") == 1


def test_requested_model_reads_only_the_top_level_model() -> None:
    """A nested "model" (metadata, tool input) or a duplicated key cannot pass an allowlist."""
    assert policy.requested_model(b'{"model": "claude-haiku", "max_tokens": 5}') == "claude-haiku"
    assert policy.requested_model(b'{"metadata": {"model": "claude-haiku"}, "model": "claude-opus"}') == "claude-opus"
    assert policy.requested_model(b'{"metadata": {"model": "claude-haiku"}}') is None
    assert policy.requested_model(b'{"model": "claude-haiku", "model": "claude-opus"}') is None
    assert policy.requested_model(b'{"model": 7}') is None
    assert policy.requested_model(b"not json") is None
    assert policy.requested_model(b'["model"]') is None


@given(st.text(alphabet="abc-", min_size=1, max_size=8), st.text(alphabet="abc-", min_size=1, max_size=8))
def test_allowlist_is_decided_by_the_top_level_model_only(allowed: str, other: str) -> None:
    limits = tokens.Limits(models=(allowed,))
    nested = json.dumps({"model": other, "metadata": {"model": allowed}, "tools": [{"model": allowed}]}).encode()
    expected_refused = other != allowed
    assert (policy.check_model(limits, policy.requested_model(nested)) is not None) is expected_refused
