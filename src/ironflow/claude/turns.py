"""Claude Code's stream-json lines as short readable lines, one line at a time (pure).

``ironflow logs`` prints a transcript condensed: what the assistant said, each tool call with
its input summarised, each tool result cut short, the final result with its turns, time and
cost. :func:`describe` takes one stored line and returns what to print for it, so a
transcript followed as it grows prints the same as one read whole. It never raises: a line
that is not a stream-json object (stderr, a pod log's other output) is shown as it is, and
an object of a kind it does not show (``rate_limit_event``, a partial-message event) is
skipped. The full lines stay in the store (``ironflow logs -o json``).

>>> describe('{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}}')
['→ Bash command="ls"']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["RESULT_CHARS", "TEXT_CHARS", "describe", "summarise_input"]

#: Most characters of a tool result, of a tool input's summary, of a thinking block.
RESULT_CHARS: Final = 200
#: Most characters of the assistant's text and of the final result.
TEXT_CHARS: Final = 2000


def _cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, marked when cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summarise_input(value: Any, limit: int = RESULT_CHARS) -> str:
    """A tool call's input in a line: ``key="value"`` pairs, each value JSON, the whole cut to ``limit``.

    >>> summarise_input({"file_path": "/w/a.py", "old_string": "x", "replace_all": False})
    'file_path="/w/a.py" old_string="x" replace_all=false'
    """
    if isinstance(value, Mapping):
        text = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in value.items())
    else:
        text = json.dumps(value, ensure_ascii=False)
    return _cut(text, limit)


def _result_text(content: Any) -> str:
    """A tool result's content as text: a string, or the text blocks of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _blocks(message: Any) -> list[Mapping[str, Any]]:
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []


def _assistant(message: Any) -> list[str]:
    out = []
    for block in _blocks(message):
        kind = block.get("type")
        if kind == "text" and str(block.get("text", "")).strip():
            out.append(f"assistant: {_cut(str(block['text']), TEXT_CHARS)}")
        elif kind == "thinking":
            out.append(f"thinking: {_cut(str(block.get('thinking', '')), RESULT_CHARS)}")
        elif kind == "tool_use":
            out.append(f"→ {block.get('name', '?')} {summarise_input(block.get('input'))}".rstrip())
    return out


def _user(message: Any) -> list[str]:
    out = []
    for block in _blocks(message):
        if block.get("type") == "tool_result":
            mark = "✗" if block.get("is_error") else "←"
            out.append(f"  {mark} {_cut(_result_text(block.get('content')), RESULT_CHARS)}".rstrip())
    return out


def _result(obj: Mapping[str, Any]) -> list[str]:
    facts = []
    if isinstance(obj.get("num_turns"), int):
        facts.append(f"{obj['num_turns']} turn{'s' * (obj['num_turns'] != 1)}")
    if isinstance(obj.get("duration_ms"), int | float):
        facts.append(f"{obj['duration_ms'] / 1000:.1f}s")
    if isinstance(obj.get("total_cost_usd"), int | float):
        facts.append(f"${obj['total_cost_usd']:.4f}")
    said = obj.get("result")
    text = said if isinstance(said, str) else json.dumps(said, ensure_ascii=False)
    head = "result (error)" if obj.get("is_error") else "result"
    details = f" ({', '.join(facts)})" if facts else ""
    return [f"{head}{details}: {_cut(text, TEXT_CHARS)}"]


def describe(line: str) -> list[str]:
    """What to print for one transcript line (possibly nothing)."""
    stripped = line.strip()
    try:
        obj = json.loads(stripped) if stripped.startswith("{") else None
    except json.JSONDecodeError:
        obj = None
    if not isinstance(obj, Mapping):
        return [line]
    kind = obj.get("type")
    if kind == "system" and obj.get("subtype") == "init":
        return [f"session started (model {obj.get('model', '?')})"]
    if kind == "assistant":
        return _assistant(obj.get("message"))
    if kind == "user":
        return _user(obj.get("message"))
    if kind == "result":
        return _result(obj)
    return []
