"""Secret values that cannot leak by accident, the scanner the tests share, and redaction.

A :class:`Secret` prints as ``Secret('***')`` in ``str``, ``repr``, f-strings and
tracebacks; only :meth:`Secret.reveal` gives the value, so every place that sends a
credential anywhere is a call to ``reveal`` that a reviewer can find with grep.

Text that comes from a sandbox (a step's transcript, its stderr) may hold a secret the
step saw; :func:`redact` replaces the values :func:`find_leaks` would find, and anything
shaped like a credential, with :data:`REDACTED` before such text is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["REDACTED", "Secret", "find_leaks", "looks_like_claude_credential", "redact"]

_REDACTED: Final = "***"


class Secret:
    """A credential, token or key; redacted everywhere but :meth:`reveal`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if isinstance(value, Secret):
            value = value.reveal()
        self._value = value

    def reveal(self) -> str:
        """The clear value: call it only where the value leaves for its one destination."""
        return self._value

    def short_id(self) -> str:
        """First 12 hex chars of the SHA-256: safe to log, stable across processes."""
        import hashlib  # here: a command that only sends a token does not load it

        return hashlib.sha256(self._value.encode()).hexdigest()[:12]

    def __bool__(self) -> bool:
        return bool(self._value)

    def __len__(self) -> int:
        return len(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        import hmac

        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __repr__(self) -> str:
        return f"Secret('{_REDACTED}')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not pickled: it would leave the process in clear")


#: Anthropic API keys and OAuth tokens start with ``sk-ant``: found anywhere in a value, in any
#: case, not only as its prefix (``"Bearer sk-ant-…"``, ``" sk-ant-…"``), but not inside a word.
_CLAUDE_CREDENTIAL: Final = re.compile(r"(?<![a-z0-9])sk-ant", re.IGNORECASE)


def looks_like_claude_credential(value: str) -> bool:
    """Whether ``value`` holds an Anthropic API key or OAuth token anywhere.

    >>> [looks_like_claude_credential(v) for v in ("sk-ant-api03-x", "Bearer sk-ant-x", " SK-ANT-x", "task-ant")]
    [True, True, True, False]
    """
    return _CLAUDE_CREDENTIAL.search(value) is not None


#: What a redacted value reads as in stored text.
REDACTED: Final = "[redacted]"
#: Credential shapes hidden wherever they appear, even inside a word: a JSON escape (``\\nsk-ant-…``)
#: or a terminal colour code (``\x1b[0msk-ant-…``) puts a letter before them. Hiding a word
#: that merely looks like one is the safe mistake.
_CREDENTIAL_SHAPES: Final = re.compile(
    r"sk-ant[\w-]*"  # Anthropic API keys and OAuth tokens
    r"|ifap_[\w-]+",  # the auth proxy's opaque tokens
    re.IGNORECASE,
)
#: A bearer token: the word stays, the token goes. It ends at a quote, a separator or a JSON escape,
#: and is 12 characters or more (tokens are; "a bearer of news" is prose).
_BEARER: Final = re.compile(r"(\bbearer\s+)([^\s\"',;\\]{12,})", re.IGNORECASE)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` and each credential-shaped value replaced by :data:`REDACTED`.

    Known values go first, as they are and as a JSON string holds them (longest first, so one
    inside another is not left half shown), then the shapes: ``sk-ant…``, ``ifap_…`` and the
    token after ``Bearer``.

    >>> redact("key=sk-ant-api03-abc, auth: Bearer tok.123456789 and hunter22", ["hunter22"])
    'key=[redacted], auth: Bearer [redacted] and [redacted]'
    """
    values = sorted({form for s in secrets if s for form in (s, json.dumps(s)[1:-1])}, key=len, reverse=True)
    if values:
        text = re.sub("|".join(map(re.escape, values)), REDACTED, text)
    text = _CREDENTIAL_SHAPES.sub(REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def _flatten(obj: Any) -> Iterable[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, bytes):
        yield obj.decode(errors="replace")
    elif isinstance(obj, BaseException):
        yield str(obj)
        yield repr(obj)
        yield from _flatten(list(obj.args))
        yield from _flatten(vars(obj) if hasattr(obj, "__dict__") else {})
    elif isinstance(obj, dict | list | tuple | set | frozenset):
        try:
            yield json.dumps(obj, default=repr, sort_keys=True)
        except (TypeError, ValueError):
            yield repr(obj)
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for _, value in items:
            yield from _flatten(value)
    else:
        yield repr(obj)
        yield str(obj)


def find_leaks(secrets: Iterable[str], *haystacks: Any) -> list[str]:
    """Return, redacted, every secret value found in any haystack (text, dict, error...).

    Errors are searched through ``str``, ``repr``, ``args`` and attributes; containers
    recursively and as JSON. The result names the leak by position, never by value.
    """
    values = [s for s in secrets if s]
    found: list[str] = []
    texts = [t for h in haystacks for t in _flatten(h)]
    for index, value in enumerate(values):
        if any(value in text for text in texts):
            found.append(f"secret #{index} ({len(value)} chars)")
    return found
