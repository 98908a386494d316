"""Label keys and the sanitiser: the reference's cases, then properties."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ironflow import labels


def test_k8s_sanitize_label_value_keeps_valid_value() -> None:
    for value in ("review", "a", "fix-bug-42", "A.b_c-9", "x" * 63):
        assert labels.sanitize_label_value(value) == value


def test_k8s_sanitize_label_value_replaces_invalid_chars_and_adds_hash() -> None:
    out = labels.sanitize_label_value("fix bug/42")
    assert out.startswith("fix-bug-42-")
    assert len(out) == len("fix-bug-42-") + 8


def test_k8s_sanitize_label_value_distinguishes_similar_inputs() -> None:
    assert labels.sanitize_label_value("fix bug") != labels.sanitize_label_value("fix/bug")


def test_k8s_sanitize_label_value_truncates_long_input() -> None:
    out = labels.sanitize_label_value("x" * 100)
    assert len(out) <= 63
    assert out.startswith("x" * 54 + "-")


def test_k8s_sanitize_label_value_trims_non_alphanumeric_edges() -> None:
    out = labels.sanitize_label_value("--hello--")
    assert out.startswith("hello-")
    assert len(out) == len("hello-") + 8


def test_k8s_sanitize_label_value_empty_and_unicode_only() -> None:
    assert labels.sanitize_label_value("").startswith("unnamed-")
    assert labels.sanitize_label_value("日本語").startswith("unnamed-")
    assert labels.sanitize_label_value("") != labels.sanitize_label_value("日本語")


def test_fnv_suffix_matches_reference_vector() -> None:
    # FNV-1a 32 of b"" is the offset basis itself.
    assert labels.sanitize_label_value("") == "unnamed-811c9dc5"


@given(st.text())
def test_k8s_sanitize_label_value_is_deterministic(raw: str) -> None:
    out = labels.sanitize_label_value(raw)
    assert labels.is_valid_label_value(out)
    assert out == labels.sanitize_label_value(raw)


@given(st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", fullmatch=True))
def test_sanitize_returns_valid_input_unchanged(raw: str) -> None:
    assert labels.sanitize_label_value(raw) == raw


def test_expires_at_parses_only_decimal() -> None:
    assert labels.expires_at({labels.ANNOTATION_EXPIRES_AT: "1700000000"}) == 1700000000
    assert labels.expires_at({labels.ANNOTATION_EXPIRES_AT: "soon"}) is None
    assert labels.expires_at({}) is None
    assert labels.expires_at(None) is None


def test_reserved_labels() -> None:
    assert labels.is_reserved_label(labels.LABEL_MANAGED_BY)
    assert labels.is_reserved_label(labels.LABEL_COMPONENT)
    assert not labels.is_reserved_label(labels.LABEL_RUN_ID)
