"""Relays for any host (pure): a proxied secret's scope (row S4b), its query injection, their wire
form and stored spec, and the provider file's ``relays:`` list."""

from __future__ import annotations

import json
import re

import pytest

from ironflow import errors
from ironflow.auth_proxy import header_policy, policy, relays, tokens
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.secrets import Secret
from ironflow.settings_file import Section

NOW = 1_700_000_000
VALUE = "real-secret-value-0123"


BEARER = tokens.Injection("bearer")
UNSCOPED = tokens.Scope()


def _secret(injection: tokens.Injection = BEARER, scope: tokens.Scope = UNSCOPED) -> tokens.SecretCredential:
    return tokens.SecretCredential("api", Secret(VALUE), injection, ("api.example.com",), scope)


def _grant(secret: tokens.SecretCredential) -> tokens.Grant:
    return tokens.Grant(id="a" * 64, run_id="r", step="s", expires_at=NOW + 60, credential=secret)


def _check(method: str, path: str, scope: tokens.Scope) -> policy.Refusal | None:
    return policy.check_secret_request(method, f"/r/api.example.com{path}", _grant(_secret(scope=scope)))[0]


def test_an_unscoped_secret_keeps_every_method_and_path() -> None:
    for method in tokens.SECRET_METHODS:
        assert _check(method, "/anything/at/all", tokens.Scope()) is None


def test_a_method_outside_the_scope_is_refused_with_403_naming_the_request() -> None:
    refusal = _check("POST", "/v1/items", tokens.Scope(methods=("GET", "HEAD")))
    assert refusal is not None
    assert (refusal.status, refusal.kind, refusal.result) == (403, "permission_error", "forbidden_scope")
    assert refusal.message == "request outside this secret's scope: POST /v1/items"
    assert json.loads(refusal.body())["error"]["message"] == refusal.message
    assert _check("HEAD", "/v1/items", tokens.Scope(methods=("GET", "HEAD"))) is None


def test_a_path_prefix_matches_whole_segments_unless_it_ends_with_a_slash() -> None:
    scope = tokens.Scope(paths=("/v1/items", "/v2/"))
    for path in ("/v1/items", "/v1/items/7", "/v2/", "/v2/x/y"):
        assert _check("GET", path, scope) is None, path
    for path in ("/v1/itemsx", "/v1", "/v2", "/", "/v3/items"):
        refusal = _check("GET", path, scope)
        assert refusal is not None, path
        assert refusal.result == "forbidden_scope", path


def test_scope_comes_after_the_method_and_path_rows() -> None:
    scope = tokens.Scope(methods=("GET",), paths=("/v1/",))
    assert _check("OPTIONS", "/v1/x", scope) is policy.SECRET_METHOD_REFUSED  # row S4 first
    assert _check("GET", "/v1/../admin", scope) is policy.SECRET_PATH_REFUSED  # row S3 first


def test_the_scope_row_and_its_result_are_in_the_rule_table() -> None:
    assert policy.__doc__ is not None
    assert re.search(r"^S4b .*outside the secret's scope .*403", policy.__doc__, re.MULTILINE)
    assert "forbidden_scope" in policy.RESULTS


def test_a_query_secret_replaces_the_sandboxs_parameter_of_its_name_however_encoded() -> None:
    secret = _secret(tokens.Injection("query", param="key"), scope=tokens.Scope())
    secret = tokens.SecretCredential("maps", Secret("a/b+c=d"), secret.injection, secret.hosts)
    assert policy.secret_query("", secret) == "key=a%2Fb%2Bc%3Dd"
    assert policy.secret_query("q=x&key=forged&k%65y=forged2&keys=1", secret) == "q=x&keys=1&key=a%2Fb%2Bc%3Dd"
    assert policy.secret_query("q=x&key=1", _secret()) == "q=x&key=1"  # a header secret leaves the query alone


def test_a_query_secret_adds_no_header_and_the_pods_token_never_goes_upstream() -> None:
    incoming = [("Authorization", "Bearer ifap_pod"), ("Accept", "*/*")]
    out = header_policy.secret_headers(incoming, _secret(tokens.Injection("query", param="key")))
    assert out == [("Accept", "*/*")]


def _credential(**extra: object) -> dict[str, object]:
    return {"name": "api", "value": VALUE, "injection": "bearer", "hosts": ["api.example.com"], **extra}


def _request(credential: dict[str, object]) -> tokens.TokenRequest:
    body = {"run_id": "r", "step": "s", "expires_at": NOW + 60, "credential": credential}
    return tokens.parse_token_request(json.dumps(body).encode(), NOW)


def test_scope_and_query_injection_go_through_the_token_request_spec_and_the_hub_wire() -> None:
    credential = _credential(injection={"query": "api_key"}, scope={"methods": ["GET"], "paths": ["/v1/"]})
    secret = _request(credential).credential
    assert isinstance(secret, tokens.SecretCredential)
    assert secret.injection == tokens.Injection("query", param="api_key")
    assert secret.scope == tokens.Scope(methods=("GET",), paths=("/v1/",))
    assert secret.spec() == {k: v for k, v in credential.items() if k != "value"}  # stored in clear, no value
    assert VALUE not in json.dumps(secret.spec())
    grant = _grant(secret)
    assert tokens.grant_from_wire(json.loads(json.dumps(tokens.grant_to_wire(grant)))) == grant
    unscoped = _request(_credential()).credential
    assert isinstance(unscoped, tokens.SecretCredential)
    assert "scope" not in unscoped.spec()  # specs stored before scopes existed read back the same


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"scope": {"methods": ["OPTIONS"]}}, "methods is a non-empty list"),
        ({"scope": {"methods": []}}, "methods is a non-empty list"),
        ({"scope": {"paths": ["v1/"]}}, "path prefixes"),
        ({"scope": {"paths": ["/v1/../x"]}}, "path prefixes"),
        ({"scope": {"paths": ["/v1%2F"]}}, "path prefixes"),
        ({"scope": {"hosts": ["x"]}}, "allowed keys are methods, paths"),
        ({"injection": {"query": "a&b"}}, "query parameter name"),
        ({"injection": {"query": ""}}, "query parameter name"),
    ],
)
def test_a_bad_scope_or_query_injection_is_refused_without_the_value(extra: dict[str, object], message: str) -> None:
    with pytest.raises(tokens.InvalidTokenRequest, match=re.escape(message)) as caught:
        _request(_credential(**extra))
    assert VALUE not in caught.value.message


def _relays(data: object, source: str = "env") -> tuple[relays.RelaySpec, ...]:
    top = Section({"relays": data}, known=("relays",))
    return relays.parse_relays(top, "env" if source == "env" else "secret")


def test_a_provider_files_relays_are_read_with_their_injection_scope_and_source() -> None:
    local, k8s = (
        _relays(
            [
                {
                    "host": "API.example.com",
                    key: value,
                    "injection": {"header": "X-Api-Key"},
                    "scope": {"methods": ["GET"], "paths": ["/v1/"]},
                }
            ],
            source,
        )[0]
        for source, key, value in (
            ("env", "credential_env", "API_TOKEN"),
            ("secret", "credential_secret", {"secret": "api", "key": "token"}),
        )
    )
    assert local.name == local.host == "api.example.com"
    assert local.env_name == "IRONFLOW_RELAY_API_EXAMPLE_COM"
    assert (local.credential_env, k8s.credential_secret) == ("API_TOKEN", relays.SecretRef("api", "token"))
    assert local.injection == tokens.Injection("header", header="X-Api-Key")
    assert k8s.scope == tokens.Scope(methods=("GET",), paths=("/v1/",))


@pytest.mark.parametrize(
    ("data", "source", "message"),
    [
        ([{"host": "a.example.com", "injection": "bearer"}], "env", "relays[0].credential_env: is required"),
        (
            [{"host": "a.example.com", "injection": "bearer", "credential_secret": {"secret": "s", "key": "k"}}],
            "env",
            "relays[0].credential_secret: is for Kubernetes providers",
        ),
        (
            [{"host": "a.example.com", "injection": "bearer", "credential_env": "X"}],
            "secret",
            "relays[0].credential_env: a pod's worker reads no variable",
        ),
        ([{"host": "*.example.com", "injection": "bearer", "credential_env": "X"}], "env", "one host, not a pattern"),
        ([{"host": "127.0.0.1", "injection": "bearer", "credential_env": "X"}], "env", "relays[0].host: invalid"),
        ([{"host": "a.example.com", "injection": "oops", "credential_env": "X"}], "env", "relays[0].injection:"),
        (
            [{"host": "a.example.com", "injection": "bearer", "credential_env": "X", "scope": {"methods": ["TRACE"]}}],
            "env",
            "relays[0].scope: methods",
        ),
        (
            [{"host": "a.example.com", "injection": "bearer", "credential_env": "X", "hots": 1}],
            "env",
            "did you mean 'host'",
        ),
        (
            [
                {"host": "a.example.com", "injection": "bearer", "credential_env": "X", "name": "a-b"},
                {"host": "b.example.com", "injection": "bearer", "credential_env": "Y", "name": "a.b"},
            ],
            "env",
            "relays[1].name: another relay has the name",
        ),
        (
            [
                {"host": "a.example.com", "injection": "bearer", "credential_env": "X", "name": "one"},
                {"host": "a.example.com", "injection": "bearer", "credential_env": "Y", "name": "two"},
            ],
            "env",
            "relays[1].host: another relay has the host",
        ),
    ],
)
def test_a_bad_relay_entry_is_refused_naming_its_key(data: object, source: str, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=re.escape(message)):
        _relays(data, source)


def test_a_relays_value_comes_from_the_named_variable_and_is_never_in_its_repr() -> None:
    (spec,) = _relays([{"host": "a.example.com", "injection": "bearer", "credential_env": "A_TOKEN"}])
    (relay,) = relays.resolve_env([spec], {"A_TOKEN": VALUE})
    assert VALUE not in repr(relay)
    assert relay.secret() == tokens.SecretCredential("a.example.com", Secret(VALUE), spec.injection, ("a.example.com",))
    with pytest.raises(errors.MissingCredential, match="needs its credential in A_TOKEN") as caught:
        relays.resolve_env([spec], {})
    assert VALUE not in str(caught.value)
    assert relays.relay_env([(spec, "ifap_t")], "http://127.0.0.1:18080/") == {
        "IRONFLOW_RELAY_A_EXAMPLE_COM": "http://127.0.0.1:18080/r/a.example.com",
        "IRONFLOW_RELAY_A_EXAMPLE_COM_TOKEN": "ifap_t",
    }


def test_a_git_host_is_one_relay_with_basic_injection_and_no_scope() -> None:
    secret = GitHosts({"git.example.com": GitCredential(Secret(VALUE), "bot")}).secret_for("git.example.com")
    assert secret == tokens.SecretCredential(
        "git", Secret(VALUE), tokens.Injection("basic", username="bot"), ("git.example.com",)
    )
