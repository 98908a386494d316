"""Which headers cross the proxy, each way: the header half of the security policy (pure).

Never does I/O, never logs. The request policy (:mod:`ironflow.auth_proxy.policy`)
decides *whether* a request is relayed; this module decides *with which headers*:

==========  =========================================================================
direction   rule
==========  =========================================================================
upstream    the pod's ``authorization``, ``x-api-key``, ``private-token``, ``cookie``,
            ``host``, ``content-length``, ``accept-encoding``, hop-by-hop headers and
            every header named in ``Connection`` never go upstream; the proxy
            appends the real credential instead (exactly one credential header)
OAuth       ``anthropic-beta`` values are joined and carry ``oauth-2025-04-20`` once
secret      as upstream, minus the secret's own custom header; the secret is injected
            the way its grant says (Bearer, Basic, ``Private-Token``, ``x-api-key``,
            a named header; a query-injected secret adds no header)
downstream  all but hop-by-hop, ``Connection``-named and ``content-length`` (the body
            is streamed), so rate-limit headers reach the pod
==========  =========================================================================

Each function walks the headers once and lower-cases each name once: it runs on every
relayed request.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Final

from ironflow.auth_proxy import tokens

__all__ = [
    "HOP_BY_HOP",
    "OAUTH_BETA_FLAG",
    "connection_named",
    "downstream_headers",
    "merge_beta",
    "secret_headers",
    "upstream_headers",
]

OAUTH_BETA_FLAG: Final = "oauth-2025-04-20"
HOP_BY_HOP: Final = tokens.HOP_BY_HOP
# The pod's own credential headers carry the opaque token: they must never go upstream.
_NEVER_UPSTREAM: Final = HOP_BY_HOP | {
    "authorization",
    "x-api-key",
    "private-token",
    "host",
    "content-length",
    "accept-encoding",
    "cookie",
}
_NEVER_UPSTREAM_OAUTH: Final = _NEVER_UPSTREAM | {"anthropic-beta"}
_NEVER_DOWNSTREAM: Final = HOP_BY_HOP | {"content-length"}


def merge_beta(values: Iterable[str]) -> str:
    """Existing ``anthropic-beta`` values joined by ``,``, plus the OAuth flag once."""
    joined = ",".join(values)
    flags = [flag.strip() for flag in joined.split(",")]
    if OAUTH_BETA_FLAG in flags:
        return joined
    return f"{joined},{OAUTH_BETA_FLAG}" if joined else OAUTH_BETA_FLAG


def _named(values: Iterable[str]) -> frozenset[str]:
    return frozenset(token.strip().lower() for value in values for token in value.split(",") if token.strip())


def connection_named(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    """Header names listed in ``Connection``: hop-by-hop for this one link (RFC 9110 §7.6.1)."""
    return _named(value for name, value in headers if name.lower() == "connection")


def _passed(
    headers: Iterable[tuple[str, str]], drop: frozenset[str], *, keep: str = ""
) -> tuple[list[tuple[str, str]], list[str]]:
    """The headers not in ``drop`` nor named by ``Connection``, and the values of ``keep``
    (a dropped header the caller still reads), in one pass."""
    out: list[tuple[str, str]] = []
    lowered: list[str] = []
    connection: list[str] = []
    kept: list[str] = []
    for name, value in headers:
        low = name.lower()
        if low in drop:
            if low == "connection":
                connection.append(value)
            elif low == keep:
                kept.append(value)
            continue
        out.append((name, value))
        lowered.append(low)
    if connection:
        named = _named(connection) - drop  # "Connection: keep-alive" names nothing left to drop
        if named:  # rare: a peer naming headers of its own as hop-by-hop
            out = [item for item, low in zip(out, lowered, strict=True) if low not in named]
    return out, kept


def upstream_headers(headers: Iterable[tuple[str, str]], credential: tokens.ClaudeCredential) -> list[tuple[str, str]]:
    """The request headers sent to the Anthropic API: the pod's minus its token, plus the credential."""
    if credential.kind == "api_key":
        out, _ = _passed(headers, _NEVER_UPSTREAM)
        out.append(("x-api-key", credential.value.reveal()))
        return out
    out, betas = _passed(headers, _NEVER_UPSTREAM_OAUTH, keep="anthropic-beta")
    out.append(("authorization", "Bearer " + credential.value.reveal()))
    out.append(("anthropic-beta", merge_beta(betas)))
    return out


def secret_headers(headers: Iterable[tuple[str, str]], secret: tokens.SecretCredential) -> list[tuple[str, str]]:
    """Request headers for a proxied secret's host: the pod's minus its token, plus the secret."""
    injection = secret.injection
    drop = _NEVER_UPSTREAM
    if injection.kind == "header" and injection.header is not None:
        drop = drop | {injection.header.lower()}
    out, _ = _passed(headers, drop)
    value = secret.value.reveal()
    if injection.kind == "bearer":
        out.append(("authorization", "Bearer " + value))
    elif injection.kind == "private_token":
        out.append(("private-token", value))
    elif injection.kind == "x_api_key":
        out.append(("x-api-key", value))
    elif injection.kind == "header" and injection.header is not None:
        out.append((injection.header, value))
    elif injection.kind == "basic":
        pair = f"{injection.username or ''}:{value}".encode()
        out.append(("authorization", "Basic " + base64.b64encode(pair).decode()))
    return out


def downstream_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The response headers the pod gets: all but hop-by-hop and ``content-length``."""
    out, _ = _passed(headers, _NEVER_DOWNSTREAM)
    return out
