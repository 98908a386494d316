"""A proxied secret (§6.9) as a value: how it reaches its host, which hosts, which requests,
and the wire forms of those parts (pure). :mod:`ironflow.auth_proxy.tokens` binds one to a
grant and re-exports these names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ironflow.secrets import Secret

__all__ = [
    "FORBIDDEN_CUSTOM_HEADERS",
    "HOP_BY_HOP",
    "SECRET_METHODS",
    "Injection",
    "InjectionKind",
    "InvalidTokenRequest",
    "Scope",
    "SecretCredential",
    "host_allowed",
    "is_header_safe",
    "parse_injection",
    "parse_scope",
    "validate_host_pattern",
]

_HOST_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
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

InjectionKind = Literal["bearer", "private_token", "x_api_key", "header", "basic", "query"]


def is_header_safe(value: str) -> bool:
    """Every char printable ASCII (0x21..0x7E): a header can carry it unchanged."""
    return bool(value) and all(0x21 <= ord(ch) <= 0x7E for ch in value)


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
