"""What the proxy relays: the request half of the security policy, as pure functions.

Never does I/O, never logs; every function is a function of its inputs, so the whole
policy is tested without a socket. The handlers apply it in this order (the first
matching row answers; later rows are never reached):

==  =============================================  ======  =====================  ==================================
#   condition                                      status  error type             message (abridged)
==  =============================================  ======  =====================  ==================================
1   absolute-form target (an authority) / CONNECT  403     permission_error       only api.anthropic.com is …
2   path starts with ``/r/``                       →       secret relay           rows S1–S5 below
3   no opaque token in any accepted header         401     authentication_error   invalid or expired … token
4   token unknown / expired / revoked              401     authentication_error   (same text: no oracle)
4b  registry down, or key version missing          503     api_error              auth proxy token registry …
5   the grant holds a proxied secret               403     permission_error       this token only reaches its …
5b  the grant is egress-only (no credential)       403     permission_error       this token only reaches the …
6   path not ``/v1/`` + ``[A-Za-z0-9/_.-]``, or    403     permission_error       only the Anthropic API under …
    ``//``, or a ``..`` segment (query unchecked)
7   method other than GET and POST                 405     invalid_request_error  only GET and POST are relayed
L1  limits: a POST whose model is not allowed      403     permission_error       this model is not allowed …
L2  limits: requests or output tokens spent        429     rate_limit_error       this token has used its …
8   body over 32 MiB or unreadable                 413     request_too_large      request body too large or …
9   upstream transport failure                     502     api_error              the Anthropic API is unreachable
10  otherwise: relay; upstream status, body streamed
==  =============================================  ======  =====================  ==================================

Secret relay (``/r/<host>/<path>``), after the token rows 3–4b:

==  =================================================  ======  =====================================================
S1  grant holds a Claude credential                    403     a Claude token only reaches the Anthropic API
S1b grant is egress-only (no credential)               403     this token only reaches the egress proxy
S2  host not in the secret's allowlist                 403     host not allowed for this secret
S3  path with ``..``, ``//``, ``%`` or other chars     403     path not allowed: no '..', '//' or percent-encoding
S4  method not GET/HEAD/POST/PUT/PATCH/DELETE          405     only GET, HEAD, POST, PUT, PATCH and DELETE are relayed
S4b method or path outside the secret's scope          403     request outside this secret's scope: <method> <path>
S5  upstream failure                                   502     upstream unreachable (``upstream_error``)
==  =================================================  ======  =====================================================

A secret injected as a query parameter (:func:`secret_query`) replaces any parameter of that
name the sandbox sent. Which headers go with a relayed request, each way, is the header policy:
:mod:`ironflow.auth_proxy.header_policy`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ironflow.auth_proxy import tokens

__all__ = [
    "ANTHROPIC_PATH_REFUSED",
    "BATCHES_PATH",
    "BODY_BUDGET_EXHAUSTED",
    "BODY_TIMEOUT",
    "BODY_TOO_LARGE",
    "CLAUDE_METHODS",
    "CLAUDE_TOKEN_ON_SECRET_RELAY",
    "DEFAULT_MAX_BODY_BYTES",
    "EGRESS_TOKEN_REFUSED",
    "INVALID_TOKEN",
    "METHOD_REFUSED",
    "MODEL_REFUSED",
    "OTHER_HOST_REFUSED",
    "REGISTRY_UNAVAILABLE",
    "RESULTS",
    "SECRET_HOST_REFUSED",
    "SECRET_METHODS",
    "SECRET_METHOD_REFUSED",
    "SECRET_ON_ANTHROPIC",
    "SECRET_PATH_REFUSED",
    "SECRET_SCOPE_REFUSED",
    "SECRET_UPSTREAM_UNREACHABLE",
    "UPSTREAM_UNREACHABLE",
    "Refusal",
    "authorization_parts",
    "check_claude_request",
    "check_limits",
    "check_model",
    "check_models",
    "check_secret_request",
    "check_target",
    "check_usage",
    "error_body",
    "extract_opaque_token",
    "is_absolute_form",
    "is_allowed_path",
    "is_relay_path_allowed",
    "requested_model",
    "requested_models",
    "scope_refusal",
    "secret_query",
    "split_secret_target",
]

#: Largest request body relayed (the reference's ``DEFAULT_MAX_BODY_BYTES``).
DEFAULT_MAX_BODY_BYTES: Final = 32 * 1024 * 1024
CLAUDE_METHODS: Final = frozenset({"GET", "POST"})
SECRET_METHODS: Final = frozenset(tokens.SECRET_METHODS)
_API_PATH = re.compile(r"/v1/[A-Za-z0-9/_.-]*")
_RELAY_PATH = re.compile(r"/[A-Za-z0-9/_.~@+-]*")


#: Every value of the metrics label ``result`` (and of a secret relay's log ``result``):
#: dashboards and alerts key on them, so they only ever grow.
RESULTS: Final = frozenset(
    {
        "relayed",
        "unauthorized",
        "unknown_token",
        "expired",
        "revoked",
        "unavailable",
        "forbidden_host",
        "forbidden_token",
        "forbidden_path",
        "forbidden_method",
        "forbidden_scope",
        "body_too_large",
        "body_timeout",
        "overloaded",
        "too_many_connections",
        "internal_error",
        "upstream_error",
        "limit_model",
        "limit_requests",
        "limit_output_tokens",
        "admin_unauthorized",
    }
)


@dataclass(frozen=True)
class Refusal:
    """An answer the proxy gives instead of relaying: status, Anthropic error type, text.

    ``event`` is the log line's event and ``result`` the metrics label.
    """

    status: int
    kind: str
    message: str
    event: str
    result: str

    def body(self) -> bytes:
        return error_body(self.kind, self.message)


OTHER_HOST_REFUSED: Final = Refusal(
    403,
    "permission_error",
    "only api.anthropic.com is reachable through this proxy",
    "request for another host refused",
    "forbidden_host",
)
INVALID_TOKEN: Final = Refusal(
    401,
    "authentication_error",
    "invalid or expired ironflow auth proxy token",
    "request with an invalid token rejected",
    "unauthorized",
)
REGISTRY_UNAVAILABLE: Final = Refusal(
    503, "api_error", "auth proxy token registry unavailable", "token registry unavailable", "unavailable"
)
SECRET_ON_ANTHROPIC: Final = Refusal(
    403,
    "permission_error",
    "this token only reaches its allowlisted hosts under /r/",
    "secret token on the Anthropic API refused",
    "forbidden_token",
)
#: Rows 5b and S1b: an egress-only token carries no credential to inject anywhere.
EGRESS_TOKEN_REFUSED: Final = Refusal(
    403,
    "permission_error",
    "this token only reaches the egress proxy",
    "egress-only token on a relay refused",
    "forbidden_token",
)
ANTHROPIC_PATH_REFUSED: Final = Refusal(
    403,
    "permission_error",
    "only the Anthropic API under /v1/ is reachable through this proxy",
    "path outside the API refused",
    "forbidden_path",
)
METHOD_REFUSED: Final = Refusal(
    405, "invalid_request_error", "only GET and POST are relayed", "method refused", "forbidden_method"
)
BODY_TOO_LARGE: Final = Refusal(
    413, "request_too_large", "request body too large or unreadable", "request body refused", "body_too_large"
)
BODY_BUDGET_EXHAUSTED: Final = Refusal(
    503,
    "overloaded_error",
    "the auth proxy is buffering too many request bodies; retry shortly",
    "request body refused",
    "overloaded",
)
BODY_TIMEOUT: Final = Refusal(
    408, "invalid_request_error", "request body not received in time", "request body refused", "body_timeout"
)
UPSTREAM_UNREACHABLE: Final = Refusal(
    502, "api_error", "the Anthropic API is unreachable", "upstream request failed", "upstream_error"
)
CLAUDE_TOKEN_ON_SECRET_RELAY: Final = Refusal(
    403,
    "permission_error",
    "a Claude token only reaches the Anthropic API",
    "secret relay",
    "forbidden_token",
)
SECRET_HOST_REFUSED: Final = Refusal(
    403, "permission_error", "host not allowed for this secret", "secret relay", "forbidden_host"
)
SECRET_PATH_REFUSED: Final = Refusal(
    403,
    "permission_error",
    "path not allowed: no '..', '//' or percent-encoding",
    "secret relay",
    "forbidden_path",
)
SECRET_METHOD_REFUSED: Final = Refusal(
    405,
    "invalid_request_error",
    "only GET, HEAD, POST, PUT, PATCH and DELETE are relayed",
    "secret relay",
    "forbidden_method",
)
#: Row S4b's answer; :func:`scope_refusal` names the request (never its query) in the message.
SECRET_SCOPE_REFUSED: Final = Refusal(
    403,
    "permission_error",
    "request outside this secret's scope",
    "secret relay",
    "forbidden_scope",
)
SECRET_UPSTREAM_UNREACHABLE: Final = Refusal(
    502, "upstream_error", "upstream unreachable", "secret relay", "upstream_error"
)


def error_body(kind: str, message: str) -> bytes:
    """The Anthropic error shape: ``{"type": "error", "error": {"type", "message"}}``."""
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def is_absolute_form(target: str) -> bool:
    """The request-target names an authority (``http://host/…``, ``host:443``), not just a path."""
    return not target.startswith("/") and target != "*"


def check_target(method: str, target: str) -> Refusal | None:
    """Row 1: a request for another host is refused before any token check."""
    if method.upper() == "CONNECT" or is_absolute_form(target):
        return OTHER_HOST_REFUSED
    return None


def _has_dot_dot(path: str) -> bool:
    return any(segment == ".." for segment in path.split("/"))


def is_allowed_path(path: str) -> bool:
    """Row 6: ``/v1/`` then only ``[A-Za-z0-9/_.-]``, no ``//``, no ``..`` segment."""
    return bool(_API_PATH.fullmatch(path)) and "//" not in path and not _has_dot_dot(path)


def is_relay_path_allowed(path: str) -> bool:
    """Row S3: a plain path under the secret's host: no ``..``, ``//`` or percent-encoding."""
    return bool(_RELAY_PATH.fullmatch(path)) and "//" not in path and not _has_dot_dot(path)


def split_secret_target(path: str) -> tuple[str, str] | None:
    """``/r/<host>/<rest>`` into ``(host, "/<rest>")``; ``None`` when no host can be read."""
    rest = path[3:]
    host, slash, tail = rest.partition("/")
    if not host:
        return None
    try:
        checked = tokens.validate_host_pattern(host)
    except tokens.InvalidTokenRequest:
        return None
    if checked.startswith("*."):
        return None
    return checked, slash + tail if slash else "/"


def extract_opaque_token(headers: Mapping[str, str]) -> str | None:
    """Row 3: the first non-empty of Bearer, ``x-api-key``, ``Private-Token``, Basic password.

    ``headers`` must be case-insensitive (aiohttp's ``CIMultiDict``).
    """
    bearer, basic = authorization_parts(headers.get("authorization", ""))
    for candidate in (bearer, headers.get("x-api-key", "").strip(), headers.get("private-token", "").strip(), basic):
        if candidate:
            return candidate
    return None


def authorization_parts(value: str) -> tuple[str, str]:
    """The Bearer token and the Basic password of an ``Authorization`` (or ``Proxy-Authorization``)
    value, each ``""`` when it carries none."""
    scheme, _, rest = value.strip().partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return rest.strip(), ""
    if scheme != "basic":
        return "", ""
    try:
        decoded = base64.b64decode(rest.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return "", ""
    return "", decoded.partition(":")[2].strip()


def check_claude_request(method: str, path: str, grant: tokens.Grant) -> Refusal | None:
    """Rows 5–7 for a token that resolved to ``grant``."""
    if isinstance(grant.credential, tokens.SecretCredential):
        return SECRET_ON_ANTHROPIC
    if isinstance(grant.credential, tokens.EgressCredential):
        return EGRESS_TOKEN_REFUSED
    if not is_allowed_path(path):
        return ANTHROPIC_PATH_REFUSED
    if method not in CLAUDE_METHODS:
        return METHOD_REFUSED
    return None


def scope_refusal(method: str, path: str) -> Refusal:
    """Row S4b for one request: the one-line reason names its method and path (the path passed row S3)."""
    message = f"{SECRET_SCOPE_REFUSED.message}: {method} {path[:200]}"
    return Refusal(SECRET_SCOPE_REFUSED.status, SECRET_SCOPE_REFUSED.kind, message, "secret relay", "forbidden_scope")


def secret_query(raw_query: str, secret: tokens.SecretCredential) -> str:
    """The query string sent upstream: the sandbox's as is, or for a query-injected secret the
    sandbox's minus any parameter of the secret's name (however encoded), plus ``name=value``."""
    injection = secret.injection
    if injection.kind != "query" or injection.param is None:
        return raw_query
    name = injection.param
    kept = [part for part in raw_query.split("&") if part and urllib.parse.unquote_plus(part.partition("=")[0]) != name]
    kept.append(f"{name}={urllib.parse.quote(secret.value.reveal(), safe='')}")
    return "&".join(kept)


def check_secret_request(method: str, path: str, grant: tokens.Grant) -> tuple[Refusal | None, str, str]:
    """Rows S1–S4b (S1b included) for ``/r/…``; also returns the host (``<invalid>`` if unreadable) and path."""
    target = split_secret_target(path)
    host, rest = target if target is not None else ("<invalid>", "")
    credential = grant.credential
    if isinstance(credential, tokens.EgressCredential):
        return EGRESS_TOKEN_REFUSED, host, rest
    if not isinstance(credential, tokens.SecretCredential):
        return CLAUDE_TOKEN_ON_SECRET_RELAY, host, rest
    if target is None or not tokens.host_allowed(host, credential.hosts):
        return SECRET_HOST_REFUSED, host, rest
    if not is_relay_path_allowed(rest):
        return SECRET_PATH_REFUSED, host, rest
    if method not in SECRET_METHODS:
        return SECRET_METHOD_REFUSED, host, rest
    if not credential.scope.allows(method, rest):
        return scope_refusal(method, rest), host, rest
    return None, host, rest


MODEL_REFUSED: Final = Refusal(
    403, "permission_error", "this model is not allowed for this token", "limit refused", "limit_model"
)


#: The Message Batches API: each of ``requests[]`` names its model under ``params``.
BATCHES_PATH: Final = "/v1/messages/batches"


def _json_without_duplicates(body: bytes) -> object | None:
    """The parsed body, or ``None`` when it is not JSON or any object repeats a key: two
    ``model`` keys would let the allowlist read one and the upstream use the other."""
    duplicate = False

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        nonlocal duplicate
        keys = [key for key, _ in items]
        duplicate = duplicate or len(set(keys)) != len(keys)
        return dict(items)

    try:
        data = json.loads(body, object_pairs_hook=pairs)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return None if duplicate else data


def _model_of(data: object) -> str | None:
    if isinstance(data, dict) and isinstance(data.get("model"), str):
        model: str = data["model"]
        return model
    return None


def requested_model(body: bytes) -> str | None:
    """The top-level ``model`` of a JSON request body; ``None`` when absent, not a string,
    given twice, or the body is not a JSON object (a limited token then fails closed)."""
    return _model_of(_json_without_duplicates(body))


def requested_models(path: str, body: bytes) -> tuple[str | None, ...]:
    """Every model a POST asks for: the top-level ``model``, or for a batch each
    ``requests[].params.model``; an unreadable entry reads ``None`` (refused)."""
    if path.rstrip("/") != BATCHES_PATH:
        return (requested_model(body),)
    data = _json_without_duplicates(body)
    requests = data.get("requests") if isinstance(data, dict) else None
    if not isinstance(requests, list) or not requests:
        return (None,)
    return tuple(_model_of(entry.get("params")) if isinstance(entry, dict) else None for entry in requests)


def check_model(limits: tokens.Limits, model: str | None) -> Refusal | None:
    """Row L1: with a model allowlist, a request naming another model (or none) is refused."""
    if limits.models is not None and model not in limits.models:
        return MODEL_REFUSED
    return None


def check_models(limits: tokens.Limits, models: Iterable[str | None]) -> Refusal | None:
    """Row L1 for every model a request names (a batch names one per entry)."""
    for model in models:
        refusal = check_model(limits, model)
        if refusal is not None:
            return refusal
    return None


def check_usage(limits: tokens.Limits, *, requests_used: int, output_tokens_used: int) -> Refusal | None:
    """Row L2: the counted requests and output tokens, checked before a request is relayed."""
    if limits.max_requests is not None and requests_used >= limits.max_requests:
        return Refusal(
            429,
            "rate_limit_error",
            f"this token has used its {limits.max_requests} requests",
            "limit refused",
            "limit_requests",
        )
    if limits.max_output_tokens is not None and output_tokens_used >= limits.max_output_tokens:
        return Refusal(
            429,
            "rate_limit_error",
            f"this token has used its {limits.max_output_tokens} output tokens",
            "limit refused",
            "limit_output_tokens",
        )
    return None


def check_limits(
    limits: tokens.Limits, *, requests_used: int, output_tokens_used: int, model: str | None
) -> Refusal | None:
    """Rows L1–L2 together, for a request that names a model (a POST with a body)."""
    return check_model(limits, model) or check_usage(
        limits, requests_used=requests_used, output_tokens_used=output_tokens_used
    )
