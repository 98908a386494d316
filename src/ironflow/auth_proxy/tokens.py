"""Opaque ``ifap_`` tokens, token ids, grants and token requests (pure, apart from the CSPRNG).

A token is ``ifap_`` + 64 lowercase hex chars from the OS CSPRNG; its id is the
SHA-256 hex of the whole token string, and logs carry only the first 12 chars of the
id. The proxy stores the id, never the token: a leaked registry cannot be replayed.

A :class:`Grant` binds a token to a run, a step, an expiry and exactly one credential:
a Claude credential (``oauth_token`` or ``api_key``), a proxied secret (§6.9), or
:class:`EgressCredential` (no secret: the token reaches the egress proxy only), plus
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
from ironflow.auth_proxy.proxied_secrets import (
    FORBIDDEN_CUSTOM_HEADERS,
    HOP_BY_HOP,
    SECRET_METHODS,
    Injection,
    InvalidTokenRequest,
    Scope,
    SecretCredential,
    host_allowed,
    is_header_safe,
    parse_injection,
    parse_scope,
    validate_host_pattern,
)
from ironflow.secrets import Secret

__all__ = [
    "FORBIDDEN_CUSTOM_HEADERS",
    "HOP_BY_HOP",
    "MAX_LIFETIME_S",
    "SECRET_METHODS",
    "TOKEN_PREFIX",
    "ClaudeCredential",
    "EgressChange",
    "EgressCredential",
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
    "parse_egress_change",
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
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
ClaudeKind = Literal["oauth_token", "api_key"]


def new_token() -> Secret:
    """A fresh opaque token from the OS CSPRNG."""
    return Secret(TOKEN_PREFIX + _secrets.token_hex(32))


def token_id(token: str) -> str:
    """Lowercase SHA-256 hex of the whole token (prefix included): what the registry stores."""
    return hashlib.sha256(token.encode()).hexdigest()


def short_id(grant_id: str) -> str:
    """The 12 chars of a token id that logs may carry."""
    return grant_id[:12]


@dataclass(frozen=True)
class ClaudeCredential:
    """The Anthropic credential the proxy injects: an OAuth token or an API key."""

    kind: ClaudeKind
    value: Secret = field(repr=False)


@dataclass(frozen=True)
class EgressCredential:
    """No credential at all: a token for a step's egress policy (``ironflow exec --allow-host``, or
    any step's ``HTTPS_PROXY``). Its grant reaches the egress proxy and nothing else (rows 5b and S1b
    refuse it on the relays), so the proxy URL every tool in a sandbox sees reaches no model and no
    secret. Issued in-process (a local step) or by the admin API (a pod's, ``{"kind": "egress"}``
    with a policy); its wire form is ``{"kind": "egress"}``, no value."""

    kind: Literal["egress"] = "egress"


Credential = ClaudeCredential | SecretCredential | EgressCredential


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
    if raw == {"kind": "egress"}:
        return EgressCredential(), ""
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
    if isinstance(credential, EgressCredential):
        if egress is None:  # it would reach nothing at all
            raise InvalidTokenRequest("an egress-only credential needs an egress policy")
    elif not value:
        raise InvalidTokenRequest("credential is empty")
    elif not is_header_safe(value):
        raise InvalidTokenRequest("credential holds characters a header cannot carry")
    return TokenRequest(run_id, step, expires_at, credential, limits, trace_context, egress)


@dataclass(frozen=True)
class EgressChange:
    """A validated ``PUT /admin/v1/runs/{run}/egress`` body: the new policy of a run's grants
    (of one ``step`` of it when named; ``None`` policy: let nothing through)."""

    egress: egress_policy.EgressPolicy | None
    step: str | None = None


def parse_egress_change(body: bytes) -> EgressChange:
    """``{"egress": POLICY|null, "step"?: NAME}``; unknown fields are refused, errors never echo the body.

    Raises:
        InvalidTokenRequest: not that shape, or a policy :class:`~ironflow.egress.EgressPolicy` refuses.
    """
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidTokenRequest("invalid egress change body: expected JSON") from None
    if not isinstance(raw, dict) or "egress" not in raw or not set(raw) <= {"egress", "step"}:
        raise InvalidTokenRequest('invalid egress change body: expected {"egress": policy or null, "step"?: name}')
    step = raw.get("step")
    if step is not None and (not isinstance(step, str) or not step):
        raise InvalidTokenRequest("invalid egress change body: step must be a step name")
    return EgressChange(_parse_egress(raw["egress"]), step)


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
    if isinstance(credential, EgressCredential):
        return {"kind": credential.kind}
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
