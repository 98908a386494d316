"""The UI's policy as values: loopback names, the token, the session cookie, CSRF fields, the headers."""

from __future__ import annotations

import pytest

from ironflow.ui import security
from ironflow.ui.security import UiSecurity

TOKEN = "a-long-enough-admin-token-0123456789"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LocalHost", True),
        ("app.localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.1", False),
        ("example.com", False),
        ("localhost.example.com", False),
        ("", False),
    ],
)
def test_loopback_is_this_machine_only(host: str, loopback: bool) -> None:
    assert security.is_loopback(host) is loopback


def test_the_host_header_names_a_host_with_or_without_a_port() -> None:
    assert [security.host_name(h) for h in ("[::1]:8090", "[::1]", "localhost:80", "a.b", "::1", None)] == [
        "::1",
        "::1",
        "localhost",
        "a.b",
        "::1",
        "",
    ]
    assert UiSecurity().request_host_ok("localhost:8090")
    assert not UiSecurity().request_host_ok("evil.example:8090")
    assert UiSecurity(TOKEN).request_host_ok("ui.example.org")  # signed in anyway


def test_the_token_or_the_session_cookie_signs_a_request_in() -> None:
    guard = UiSecurity(TOKEN)
    assert guard.signed_in(authorization=f"Bearer {TOKEN}", cookie=None)
    assert guard.signed_in(authorization=f"bearer  {TOKEN}", cookie=None)
    assert guard.signed_in(authorization=None, cookie=guard.session_value())
    for authorization, cookie in [
        (None, None),
        ("Bearer nope", None),
        (f"Basic {TOKEN}", None),
        ("Bearer é", None),
        (None, TOKEN),
        (None, UiSecurity(TOKEN).session_value()),
        (None, "é"),
    ]:
        assert not guard.signed_in(authorization=authorization, cookie=cookie), (authorization, cookie)
    assert UiSecurity().signed_in(authorization=None, cookie=None)  # no token: loopback only, no sign-in
    assert not UiSecurity().session_ok(UiSecurity().session_value())


def test_a_csrf_field_is_bound_to_its_form_and_its_process() -> None:
    guard = UiSecurity()
    token = guard.csrf_token("/runs/a/cancel")
    assert guard.csrf_ok("/runs/a/cancel", token)
    assert not guard.csrf_ok("/runs/b/cancel", token)
    assert not guard.csrf_ok("/runs/a/retry", token)
    assert not UiSecurity().csrf_ok("/runs/a/cancel", token)
    assert not guard.csrf_ok("/runs/a/cancel", None)
    assert not guard.csrf_ok("/runs/a/cancel", token.upper() + "é")


def test_no_secret_in_the_repr_and_the_headers_forbid_framing_and_foreign_scripts() -> None:
    guard = UiSecurity(TOKEN)
    assert TOKEN not in repr(guard)
    assert guard.secret.hex() not in repr(guard)
    assert guard.secret.hex() not in guard.session_value()
    csp = security.SECURITY_HEADERS["Content-Security-Policy"]
    assert "default-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert security.SECURITY_HEADERS["X-Content-Type-Options"] == "nosniff"
