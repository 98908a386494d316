"""``secrets.redact``: what a stored transcript keeps of a secret is the marker, never the value,
whatever text surrounds it (the scan the leak tests use finds nothing afterwards)."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow.secrets import REDACTED, find_leaks, looks_like_claude_credential, redact

API_KEY = "sk-ant-api03-" + "A1b2_C3d4-" * 8
PROXY_TOKEN = "ifap_" + "0123456789abcdef" * 4

#: Known secrets as a provider holds them: long enough not to occur inside the marker itself.
known_secrets = st.text(alphabet=string.ascii_letters + string.digits + "+/=.-_", min_size=12, max_size=40)
around = st.text(max_size=40)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"echo {API_KEY}", f"echo {REDACTED}"),
        (f'{{"content":"line one\\n{API_KEY}\\n"}}', f'{{"content":"line one\\n{REDACTED}\\n"}}'),
        (f"\x1b[0m{API_KEY}\x1b[0m", f"\x1b[0m{REDACTED}\x1b[0m"),
        (f"ANTHROPIC_AUTH_TOKEN={PROXY_TOKEN}", f"ANTHROPIC_AUTH_TOKEN={REDACTED}"),
        ("Authorization: Bearer eyJhbGciOi.J9x-y", f"Authorization: Bearer {REDACTED}"),
        ('"authorization":"bearer abc123def456","x":1', f'"authorization":"bearer {REDACTED}","x":1'),
        ("the ifap_ prefix and a bearer of news", "the ifap_ prefix and a bearer of news"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_credential_shapes_are_replaced_and_the_rest_is_kept(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_a_known_value_goes_as_it_is_and_as_a_json_string_holds_it() -> None:
    value = 'pa"ss\\word-1234'
    line = json.dumps({"plain": value, "again": f"x{value}y"})
    assert value in json.loads(line)["plain"]
    assert redact(line, [value]) == json.dumps({"plain": REDACTED, "again": f"x{REDACTED}y"})


def test_a_value_inside_another_is_not_left_half_shown() -> None:
    assert redact("token-abcdef-123456", ["abcdef", "token-abcdef-123456"]) == REDACTED


@given(before=around, after=around, secret=known_secrets)
def test_no_known_secret_survives_whatever_surrounds_it(before: str, after: str, secret: str) -> None:
    assert find_leaks([secret], redact(before + secret + after, [secret])) == []


@given(before=around, after=around, tail=st.text(alphabet=string.ascii_letters + string.digits + "-_", max_size=30))
def test_no_anthropic_key_survives_whatever_surrounds_it(before: str, after: str, tail: str) -> None:
    redacted = redact(before + "sk-ant-" + tail + after)
    assert not looks_like_claude_credential(redacted)
    assert "sk-ant" not in redacted.lower()


@given(text=st.text(max_size=80), secret=known_secrets)
def test_redacting_twice_changes_nothing_more(text: str, secret: str) -> None:
    once = redact(text, [secret])
    assert redact(once, [secret]) == once


@given(text=st.text(alphabet=string.ascii_letters + " .,:\n", max_size=80))
def test_text_without_a_credential_shape_is_unchanged(text: str) -> None:
    if "bearer" not in text.lower():
        assert redact(text) == text
