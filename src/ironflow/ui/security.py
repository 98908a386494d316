"""Who may see and change what through ``ironflow ui``: the policy, as pure functions of a request's parts.

=============================  =================================================================
request                        rule
=============================  =================================================================
any, no admin token set        served only when bound to loopback (the CLI refuses another
                               ``--host`` without a token) and the ``Host`` header names a
                               loopback address: a page a browser fetched under another name
                               (DNS rebinding) is refused
any, admin token set           needs ``Authorization: Bearer TOKEN`` or the session cookie that
                               ``POST /login`` with the token sets; both compared in constant time
``POST`` (cancel, retry,       needs the form field ``csrf``: an HMAC of the form's path under a
login)                         per-process secret, compared in constant time (another site can
                               post to the UI but cannot read a page to learn the field)
``GET /static/*``              served to anyone (the stylesheet; it holds nothing of a store)
every answer                   the headers of :data:`SECURITY_HEADERS`: no script, frame or form
                               target outside the UI itself, no sniffing, no referrer, no cache
=============================  =================================================================

The session cookie is an HMAC under the per-process secret, never the token itself, and is
HttpOnly and SameSite=Strict; restarting the UI signs everyone out. Nothing here holds a
store's data, and :class:`UiSecurity`'s repr hides its secret and the token.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "CSRF_FIELD",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "UiSecurity",
    "bearer_token",
    "host_name",
    "is_loopback",
]

#: The form field every POST carries.
CSRF_FIELD: Final = "csrf"
#: The cookie ``POST /login`` sets when an admin token is required.
SESSION_COOKIE: Final = "ironflow_ui_session"

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine's loopback only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str | None) -> str:
    """The host part of a ``Host`` header (``[::1]:8090`` → ``::1``, ``localhost:80`` → ``localhost``)."""
    value = (header or "").strip()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header, or None."""
    scheme, _, value = (header or "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def _mac(secret: bytes, purpose: str, value: str) -> str:
    return hmac.new(secret, f"{purpose}\0{value}".encode(), hashlib.sha256).hexdigest()


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of two texts (bytes, so any text a client sends can be compared)."""
    return hmac.compare_digest(given.encode(), expected.encode())


@dataclass(frozen=True, repr=False)
class UiSecurity:
    """The per-process secret and the admin token (None: loopback only, no sign-in)."""

    token: str | None = None
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def __repr__(self) -> str:
        return f"UiSecurity(token={'set' if self.token else 'none'}, secret=<hidden>)"

    @property
    def sign_in_required(self) -> bool:
        return self.token is not None

    def request_host_ok(self, host_header: str | None) -> bool:
        """Without a token only loopback names are served (no DNS rebinding onto the open UI)."""
        return self.sign_in_required or is_loopback(host_name(host_header))

    def token_ok(self, given: str | None) -> bool:
        if self.token is None or given is None:
            return False
        return _same(given, self.token)

    def session_value(self) -> str:
        """The session cookie's value: bound to this process and this token, never the token."""
        return _mac(self.secret, "session", hashlib.sha256((self.token or "").encode()).hexdigest())

    def session_ok(self, cookie: str | None) -> bool:
        return self.token is not None and cookie is not None and _same(cookie, self.session_value())

    def signed_in(self, *, authorization: str | None, cookie: str | None) -> bool:
        """Whether a request may see pages: no token needed, or the token or the session shown."""
        return not self.sign_in_required or self.token_ok(bearer_token(authorization)) or self.session_ok(cookie)

    def csrf_token(self, path: str) -> str:
        """The ``csrf`` field of the form that posts to ``path``."""
        return _mac(self.secret, "csrf", path)

    def csrf_ok(self, path: str, given: str | None) -> bool:
        return given is not None and _same(given, self.csrf_token(path))
