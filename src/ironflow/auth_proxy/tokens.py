"""Opaque ``ifap_`` tokens, token ids, grants and token requests (pure, apart from the CSPRNG).

A token is ``ifap_`` + 64 lowercase hex chars from the OS CSPRNG; its id is the
SHA-256 hex of the whole token string, and logs carry only the first 12 chars of the
id. The proxy stores the id, never the token: a leaked registry cannot be replayed.

A :class:`Grant` binds a token to a run, a step, an expiry and exactly one credential:
a Claude credential (``oauth_token`` or ``api_key``) or a proxied secret (§6.9), plus
optional :class:`Limits` fixed at issue time, optionally the W3C ``traceparent`` of the step
it was issued for (the parent of the proxy's request spans), and optionally the step's egress
policy (what its egress proxy lets through; ``None`` lets nothing through). :func:`parse_token_request` validates the
admin API body in the contract's order; its errors never echo the body.

>>> token = new_token()
>>> token.reveal().startswith("ifap_") and len(token.reveal())
69
>>> len(token_id(token.reveal()))
64
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets as _secrets
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ironflow import egress as egress_policy
from ironflow.secrets import Secret

__all__ = [
    "FORBIDDEN_CUSTOM_HEADERS",
    "HOP_BY_HOP",
    "MAX_LIFETIME_S",
    "SECRET_METHODS",
    "TOKEN_PREFIX",
    "ClaudeCredential",
    "Grant",
    "Injection",
    "InvalidTokenRequest",
    "Limits",
    "Scope",
    "SecretCredential",
    "TokenRequest",
    "credential_to_wire",
    "grant_from_wire",
    "grant_to_wire",
    "host_allowed",
    "is_header_safe",
    "new_token",
    "parse_injection",
    "parse_scope",
    "parse_token_request",
    "short_id",
    "token_id",
    "validate_host_pattern",
]

TOKEN_PREFIX: Final = "ifap_"  # noqa: S105 - a prefix, not a secret
#: Longest lifetime of a token (exactly 24 h is accepted).
MAX_LIFETIME_S: Final = 86_400
_SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_HOST_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: A query parameter name the proxy adds as is: unreserved URL characters only, nothing to encode.
_QUERY_NAME = re.compile(r"[A-Za-z0-9_.~-]{1,64}")
#: A scope's path prefix: a plain path as the relay accepts it (row S3).
_SCOPE_PATH = re.compile(r"/[A-Za-z0-9/_.~@+-]*")
#: The methods a proxied secret may be relayed with at most (row S4); a scope narrows them.
SECRET_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
#: Headers that describe one connection, never forwarded in either direction.
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: A proxied secret may not be injected as one of these headers.
FORBIDDEN_CUSTOM_HEADERS: Final = HOP_BY_HOP | {"host", "content-length", "cookie", "accept-encoding"}

ClaudeKind = Literal["oauth_token", "api_key"]
InjectionKind = Literal["bearer", "private_token", "x_api_key", "header", "basic", "query"]


def new_token() -> Secret:
    """A fresh opaque token from the OS CSPRNG."""
    return Secret(TOKEN_PREFIX + _secrets.token_hex(32))


def token_id(token: str) -> str:
    """Lowercase SHA-256 hex of the whole token (prefix included): what the registry stores."""
    return hashlib.sha256(token.encode()).hexdigest()


def short_id(grant_id: str) -> str:
    """The 12 chars of a token id that logs may carry."""
    return grant_id[:12]


def is_header_safe(value: str) -> bool:
    """Every char printable ASCII (0x21..0x7E): a header can carry it unchanged."""
    return bool(value) and all(0x21 <= ord(ch) <= 0x7E for ch in value)


@dataclass(frozen=True)
class ClaudeCredential:
    """The Anthropic credential the proxy injects: an OAuth token or an API key."""

    kind: ClaudeKind
    value: Secret = field(repr=False)


@dataclass(frozen=True)
class Injection:
    """How a proxied secret reaches its host: a known header, a custom one, Basic auth, or a
    query parameter (``param``; the proxy never logs a query string)."""

    kind: InjectionKind
    header: str | None = None
    username: str | None = None
    param: str | None = None

    def to_json(self) -> Any:
        if self.kind == "header":
            return {"header": self.header}
        if self.kind == "basic":
            return {"basic": {"username": self.username}}
        if self.kind == "query":
            return {"query": self.param}
        return self.kind


@dataclass(frozen=True)
class Scope:
    """Which requests a proxied secret may make (row S4b): its methods (``None``: all of
    :data:`SECRET_METHODS`) and path prefixes (``None``: any path).

    A prefix ending in ``/`` matches any path under it; one that does not matches that path
    and the paths under it (``/v1/repos`` matches ``/v1/repos/x``, never ``/v1/reposx``).

    >>> Scope(methods=("GET",), paths=("/v1/repos",)).allows("GET", "/v1/repos/x")
    True
    >>> Scope(paths=("/v1/repos",)).allows("GET", "/v1/reposx")
    False
    """

    methods: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None

    def allows(self, method: str, path: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        if self.paths is None:
            return True
        return any(
            path.startswith(prefix) if prefix.endswith("/") else path == prefix or path.startswith(prefix + "/")
            for prefix in self.paths
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.methods is not None:
            out["methods"] = list(self.methods)
        if self.paths is not None:
            out["paths"] = list(self.paths)
        return out


@dataclass(frozen=True)
class SecretCredential:
    """A proxied secret (§6.9): relayed under ``/r/<host>/`` to its allowlisted hosts only,
    for the requests its ``scope`` allows."""

    name: str
    value: Secret = field(repr=False)
    injection: Injection
    hosts: tuple[str, ...]
    scope: Scope = Scope()

    def spec(self) -> dict[str, Any]:
        """Everything but the value: stored in clear (``secret_spec``); an unscoped secret has no ``scope``."""
        out: dict[str, Any] = {"name": self.name, "injection": self.injection.to_json(), "hosts": list(self.hosts)}
        if scope := self.scope.to_json():
            out["scope"] = scope
        return out


Credential = ClaudeCredential | SecretCredential


@dataclass(frozen=True)
class Limits:
    """Per-token limits fixed at issue time; ``None`` means unlimited.

    ``models`` is an allowlist of exact model names; ``max_output_tokens`` counts the
    output tokens reported in the streamed usage of every relayed response.
    """

    models: tuple[str, ...] | None = None
    max_requests: int | None = None
    max_output_tokens: int | None = None

    @property
    def empty(self) -> bool:
        return self.models is None and self.max_requests is None and self.max_output_tokens is None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.models is not None:
            out["models"] = list(self.models)
        if self.max_requests is not None:
            out["max_requests"] = self.max_requests
        if self.max_output_tokens is not None:
            out["max_output_tokens"] = self.max_output_tokens
        return out


@dataclass(frozen=True)
class Grant:
    """What a token id unlocks; its repr shows no credential value."""

    id: str
    run_id: str
    step: str
    expires_at: int
    credential: Credential
    limits: Limits = Limits()
    trace_context: str | None = None
    egress: egress_policy.EgressPolicy | None = None

    @property
    def short_id(self) -> str:
        return short_id(self.id)


@dataclass(frozen=True)
class TokenRequest:
    """A validated ``POST /admin/v1/tokens`` body."""

    run_id: str
    step: str
    expires_at: int
    credential: Credential
    limits: Limits = Limits()
    trace_context: str | None = None
    egress: egress_policy.EgressPolicy | None = None


class InvalidTokenRequest(ValueError):
    """A token request the admin API refuses with 400; the message is the contract's text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def validate_host_pattern(host: str) -> str:
    """Lowercased DNS name with ≥ 2 labels, or ``*.`` + such a name; no IP, port, scheme or path."""
    lowered = host.strip().lower()
    name = lowered[2:] if lowered.startswith("*.") else lowered
    labels = name.split(".")
    if (
        len(labels) < 2
        or len(name) > 253
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()
    ):
        raise InvalidTokenRequest(f"invalid secret host {host[:100]!r}: expected a DNS name like git.example.com")
    return lowered


def host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    """Exact match, or ``*.name`` matching strict subdomains of ``name`` only."""
    host = host.lower()
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def parse_injection(raw: Any) -> Injection:
    """An injection's wire form (``"bearer"``, ``{"header": …}``, ``{"basic": …}``, ``{"query": …}``).

    Raises:
        InvalidTokenRequest: naming the accepted forms, never a value.
    """
    if raw in ("bearer", "private_token", "x_api_key"):
        return Injection(raw)
    if isinstance(raw, dict) and len(raw) == 1:
        if "query" in raw:
            if not isinstance(raw["query"], str) or not _QUERY_NAME.fullmatch(raw["query"]):
                raise InvalidTokenRequest(
                    "invalid secret injection: a query parameter name is 1 to 64 of [A-Za-z0-9_.~-]"
                )
            return Injection("query", param=raw["query"])
        if isinstance(raw.get("header"), str):
            header = raw["header"]
            if not _HEADER_NAME.fullmatch(header) or header.lower() in FORBIDDEN_CUSTOM_HEADERS:
                raise InvalidTokenRequest("invalid secret injection: this header cannot carry a secret")
            return Injection("header", header=header)
        basic = raw.get("basic")
        if isinstance(basic, dict) and set(basic) == {"username"} and isinstance(basic["username"], str):
            username = basic["username"]
            if ":" in username or not all(0x20 <= ord(ch) <= 0x7E for ch in username):
                raise InvalidTokenRequest(
                    "invalid secret injection: Basic username must be printable ASCII without ':'"
                )
            return Injection("basic", username=username)
    raise InvalidTokenRequest(
        'invalid secret injection: expected "bearer", "private_token", "x_api_key", '
        '{"header": name}, {"basic": {"username": name}} or {"query": name}'
    )


def parse_scope(raw: Any) -> Scope:
    """A scope's wire form ``{"methods": [...], "paths": [...]}`` (either may be left out).

    Raises:
        InvalidTokenRequest: an unknown key, a method not relayed at all, a path prefix the relay refuses.
    """
    if raw is None:
        return Scope()
    if not isinstance(raw, dict) or not set(raw) <= {"methods", "paths"}:
        raise InvalidTokenRequest("invalid secret scope: allowed keys are methods, paths")
    methods = raw.get("methods")
    if methods is not None and (
        not isinstance(methods, list) or not methods or not all(m in SECRET_METHODS for m in methods)
    ):
        raise InvalidTokenRequest("invalid secret scope: methods is a non-empty list of " + ", ".join(SECRET_METHODS))
    paths = raw.get("paths")
    if paths is not None and (
        not isinstance(paths, list)
        or not paths
        or not all(
            isinstance(p, str) and _SCOPE_PATH.fullmatch(p) and "//" not in p and ".." not in p.split("/")
            for p in paths
        )
    ):
        raise InvalidTokenRequest(
            "invalid secret scope: paths is a non-empty list of path prefixes like /api/v1/ "
            "(no '..', '//' or percent-encoding)"
        )
    return Scope(
        methods=tuple(dict.fromkeys(methods)) if methods is not None else None,
        paths=tuple(dict.fromkeys(paths)) if paths is not None else None,
    )


def _parse_limits(raw: Any) -> Limits:
    if raw is None:
        return Limits()
    if not isinstance(raw, dict) or not set(raw) <= {"models", "max_requests", "max_output_tokens"}:
        raise InvalidTokenRequest("invalid limits: allowed keys are models, max_requests, max_output_tokens")
    models = raw.get("models")
    if models is not None and (
        not isinstance(models, list) or not models or not all(isinstance(m, str) and m for m in models)
    ):
        raise InvalidTokenRequest("invalid limits: models must be a non-empty list of model names")
    numbers: dict[str, int | None] = {}
    for key in ("max_requests", "max_output_tokens"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidTokenRequest(f"invalid limits: {key} must be a positive integer")
        numbers[key] = value
    return Limits(
        models=tuple(models) if models is not None else None,
        max_requests=numbers["max_requests"],
        max_output_tokens=numbers["max_output_tokens"],
    )


def _parse_credential(raw: Any) -> tuple[Credential, str]:
    """The credential and its value (validated by the caller in the contract's order)."""
    if not isinstance(raw, dict):
        raise InvalidTokenRequest("invalid token request body")
    value = raw.get("value")
    if not isinstance(value, str):
        raise InvalidTokenRequest("invalid token request body")
    if set(raw) == {"kind", "value"}:
        if raw["kind"] not in ("oauth_token", "api_key"):
            raise InvalidTokenRequest("invalid token request body")
        return ClaudeCredential(raw["kind"], Secret(value)), value
    if {"name", "value", "injection", "hosts"} <= set(raw) <= {"name", "value", "injection", "hosts", "scope"}:
        name = raw["name"]
        if not isinstance(name, str) or not _SECRET_NAME.fullmatch(name):
            raise InvalidTokenRequest("invalid secret name: 1 to 64 of [A-Za-z0-9_.-]")
        hosts = raw["hosts"]
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
            raise InvalidTokenRequest("invalid secret hosts: give at least one host")
        patterns = tuple(validate_host_pattern(h) for h in hosts)
        injection, scope = parse_injection(raw["injection"]), parse_scope(raw.get("scope"))
        return SecretCredential(name, Secret(value), injection, patterns, scope), value
    raise InvalidTokenRequest("invalid token request body")


def parse_token_request(body: bytes, now: int) -> TokenRequest:
    """Validate an issue request in the contract's order; unknown fields are refused.

    Raises:
        InvalidTokenRequest: with the contract's message; never the body or a value.
    """
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidTokenRequest("invalid token request body") from None
    required = {"run_id", "step", "expires_at", "credential"}
    if (
        not isinstance(raw, dict)
        or not required <= set(raw)
        or not set(raw) <= required | {"limits", "trace_context", "egress"}
    ):
        raise InvalidTokenRequest("invalid token request body")
    run_id, step, expires_at = raw["run_id"], raw["step"], raw["expires_at"]
    if not isinstance(run_id, str) or not isinstance(step, str):
        raise InvalidTokenRequest("invalid token request body")
    if isinstance(expires_at, bool) or not isinstance(expires_at, int) or not 0 <= expires_at < 2**63:
        raise InvalidTokenRequest("invalid token request body")
    credential, value = _parse_credential(raw["credential"])
    limits = _parse_limits(raw.get("limits"))
    trace_context = _parse_trace_context(raw.get("trace_context"))
    egress = _parse_egress(raw.get("egress"))
    if expires_at <= now:
        raise InvalidTokenRequest("expires_at is in the past")
    if expires_at - now > MAX_LIFETIME_S:
        raise InvalidTokenRequest("expires_at is more than 24 hours away")
    if not run_id:
        raise InvalidTokenRequest("run_id is empty")
    if not step:
        raise InvalidTokenRequest("step is empty")
    if not value:
        raise InvalidTokenRequest("credential is empty")
    if not is_header_safe(value):
        raise InvalidTokenRequest("credential holds characters a header cannot carry")
    return TokenRequest(run_id, step, expires_at, credential, limits, trace_context, egress)


def _parse_egress(raw: Any) -> egress_policy.EgressPolicy | None:
    if raw is None:
        return None
    try:
        return egress_policy.EgressPolicy.from_json(raw)
    except egress_policy.InvalidEgressPolicy as exc:
        raise InvalidTokenRequest(f"invalid egress policy: {str(exc)[:200]}") from None


def _parse_trace_context(raw: Any) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not _TRACEPARENT.fullmatch(raw):
        raise InvalidTokenRequest("trace_context is not a W3C traceparent")
    return raw


def credential_to_wire(credential: Credential) -> dict[str, Any]:
    """A credential as the admin API body and the hub socket carry it (the value included)."""
    if isinstance(credential, SecretCredential):
        return {**credential.spec(), "value": credential.value.reveal()}
    return {"kind": credential.kind, "value": credential.value.reveal()}


def grant_to_wire(grant: Grant) -> dict[str, Any]:
    """A grant as JSON for the local registry hub's socket (the credential value included)."""
    return {
        "id": grant.id,
        "run_id": grant.run_id,
        "step": grant.step,
        "expires_at": grant.expires_at,
        "credential": credential_to_wire(grant.credential),
        "limits": grant.limits.to_json() or None,
        "trace_context": grant.trace_context,
        "egress": None if grant.egress is None else grant.egress.to_json(),
    }


def grant_from_wire(data: dict[str, Any], *, source: str = "on the registry hub socket") -> Grant:
    """The inverse of :func:`grant_to_wire`; raises :class:`InvalidTokenRequest` on a bad shape.

    ``source`` names where the grant came from in that error's text.
    """
    try:
        credential, _ = _parse_credential(data["credential"])
        return Grant(
            id=str(data["id"]),
            run_id=str(data["run_id"]),
            step=str(data["step"]),
            expires_at=int(data["expires_at"]),
            credential=credential,
            limits=_parse_limits(data.get("limits")),
            trace_context=_parse_trace_context(data.get("trace_context")),
            egress=_parse_egress(data.get("egress")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidTokenRequest(f"invalid grant {source}") from exc
