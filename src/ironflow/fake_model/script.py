"""The script an offline Anthropic fake answers from: turns, usage, and its YAML form (pure).

A script is a value: a list of turns answered in order, then a default turn forever.
Loading a YAML file is the only I/O here; every malformed entry raises ConfigError
naming where it is (``turns[2]``) and what is expected. Schema: ``docs/claude.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ironflow import errors, settings_file

__all__ = ["DEFAULT_REPLY", "FAKE_MODEL_KEY", "ErrorTurn", "Script", "TextTurn", "ToolUseTurn", "Turn", "Usage"]

#: The key the offline model server admits (the in-process proxy hands it over, nothing else does).
#: Here, not in the server's module, so the CLI can name it without importing aiohttp.
FAKE_MODEL_KEY: Final = "sk-ant-api03-offline-fake-model-dummy-key"
#: What the offline model answers, unscripted.
DEFAULT_REPLY: Final = "Hello from the sandbox! (offline fake model)"


@dataclass(frozen=True)
class Usage:
    """Token counts put in a reply; big numbers drive the CLI's cost and budget checks."""

    input_tokens: int = 10
    output_tokens: int = 5
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


@dataclass(frozen=True)
class TextTurn:
    """The model answers ``text`` and stops (``stop_reason``)."""

    text: str
    stop_reason: str = "end_turn"
    usage: Usage | None = None
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    #: A thinking block sent before the text (with a fake signature).
    thinking: str | None = None


@dataclass(frozen=True)
class ToolUseTurn:
    """The model calls tool ``name`` with ``input`` (optionally after some ``text``)."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    text: str | None = None
    id: str | None = None
    usage: Usage | None = None
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    #: A thinking block sent before the text and the call (with a fake signature).
    thinking: str | None = None


@dataclass(frozen=True)
class ErrorTurn:
    """The API refuses the request with ``status`` and an Anthropic-shaped error body.

    With ``mid_stream`` a streaming request gets 200, ``message_start``, then an SSE
    ``error`` event, as the real API does when it overloads during a reply.
    """

    status: int
    type: str = "api_error"
    message: str = "injected error"
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    mid_stream: bool = False

    def body(self) -> dict[str, Any]:
        return {
            "type": "error",
            "error": {"type": self.type, "message": self.message},
            "request_id": f"req_fake_{uuid.uuid4().hex[:20]}",
        }


Turn = TextTurn | ToolUseTurn | ErrorTurn

_ERROR_KEYS: Final = frozenset({"status", "type", "message", "mid_stream"})
_TOOL_KEYS: Final = frozenset({"name", "input", "id"})
_TURN_KEYS: Final = frozenset({"text", "tool_use", "error", "stop_reason", "usage", "delay_s", "headers", "thinking"})
_SCRIPT_KEYS: Final = frozenset({"turns", "default", "usage"})


def _problem(where: str, what: str) -> errors.ConfigError:
    return errors.ConfigError(f"fake-anthropic script: {where}: {what}")


def _usage_from(data: Any, where: str) -> Usage:
    if not isinstance(data, Mapping):
        raise _problem(where, "usage must be a mapping of token counts")
    known = {"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise _problem(where, f"unknown usage key '{unknown[0]}'; known: {', '.join(sorted(known))}")
    for key, value in data.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise _problem(where, f"usage.{key} must be a non-negative integer, got {value!r}")
    return Usage(**data)


def _no_unknown(data: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise _problem(where, f"unknown key '{unknown[0]}'; known: {', '.join(sorted(known))}")


def _turn_from(data: Any, where: str) -> Turn:
    if isinstance(data, str):
        return TextTurn(data)
    if not isinstance(data, Mapping):
        raise _problem(where, "a turn is a text or a mapping with one of text, tool_use, error")
    unknown = sorted(set(data) - _TURN_KEYS)
    if unknown:
        raise _problem(where, f"unknown turn key '{unknown[0]}'; known: {', '.join(sorted(_TURN_KEYS))}")
    delay = data.get("delay_s", 0.0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
        raise _problem(where, f"delay_s must be a non-negative number, got {delay!r}")
    headers = data.get("headers", {})
    if not isinstance(headers, Mapping):
        raise _problem(where, "headers must be a mapping of header names to values")
    headers = {str(k): str(v) for k, v in headers.items()}
    usage = _usage_from(data["usage"], where) if "usage" in data else None
    thinking = data.get("thinking")
    if thinking is not None and not isinstance(thinking, str):
        raise _problem(where, "thinking must be a text")
    if "error" in data:
        err = data["error"]
        if "tool_use" in data or "text" in data or thinking is not None:
            raise _problem(where, "an error turn cannot also have text, thinking or tool_use")
        if not isinstance(err, Mapping) or not isinstance(err.get("status"), int):
            raise _problem(where, "error needs an integer status, e.g. {status: 529, type: overloaded_error}")
        _no_unknown(err, _ERROR_KEYS, f"{where}.error")
        if not 400 <= err["status"] <= 599:
            raise _problem(where, f"error status must be 400-599, got {err['status']}")
        return ErrorTurn(
            status=err["status"],
            type=str(err.get("type", "api_error")),
            message=str(err.get("message", "injected error")),
            delay_s=float(delay),
            headers=headers,
            mid_stream=bool(err.get("mid_stream", False)),
        )
    if "tool_use" in data:
        tool = data["tool_use"]
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise _problem(where, "tool_use needs a name, e.g. {name: Bash, input: {command: 'ls'}}")
        _no_unknown(tool, _TOOL_KEYS, f"{where}.tool_use")
        tool_input = tool.get("input", {})
        if not isinstance(tool_input, Mapping):
            raise _problem(where, "tool_use.input must be a mapping")
        text = data.get("text")
        return ToolUseTurn(
            name=tool["name"],
            input=dict(tool_input),
            text=None if text is None else str(text),
            id=None if tool.get("id") is None else str(tool["id"]),
            usage=usage,
            delay_s=float(delay),
            headers=headers,
            thinking=thinking,
        )
    if "text" in data:
        return TextTurn(
            str(data["text"]),
            stop_reason=str(data.get("stop_reason", "end_turn")),
            usage=usage,
            delay_s=float(delay),
            headers=headers,
            thinking=thinking,
        )
    raise _problem(where, "a turn needs one of text, tool_use, error")


@dataclass(frozen=True)
class Script:
    """What the fake answers: ``turns`` in order, then ``default`` forever (None: a 500)."""

    turns: tuple[Turn, ...] = ()
    default: Turn | None = TextTurn("OK")
    usage: Usage = Usage()

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", tuple(self.turns))

    @classmethod
    def of(cls, *turns: Turn | str, default: Turn | str | None = "OK", usage: Usage | None = None) -> Script:
        """A script from turns; a plain string is a text turn."""
        as_turn = [TextTurn(t) if isinstance(t, str) else t for t in turns]
        dflt = TextTurn(default) if isinstance(default, str) else default
        return cls(tuple(as_turn), dflt, usage or Usage())

    @classmethod
    def from_dict(cls, data: Any) -> Script:
        """Build from the YAML schema (see docs/claude.md); an unknown key is refused by name."""
        if data is None:
            return cls()
        if isinstance(data, Sequence) and not isinstance(data, str):
            data = {"turns": list(data)}
        if not isinstance(data, Mapping):
            raise _problem("top level", "expected a mapping with turns, default, usage (or a list of turns)")
        unknown = sorted(set(data) - _SCRIPT_KEYS)
        if unknown:
            raise _problem("top level", f"unknown key '{unknown[0]}'; known: {', '.join(sorted(_SCRIPT_KEYS))}")
        raw_turns = data.get("turns") or []
        if not isinstance(raw_turns, Sequence) or isinstance(raw_turns, str):
            raise _problem("turns", "must be a list of turns")
        turns = tuple(_turn_from(t, f"turns[{i}]") for i, t in enumerate(raw_turns))
        default: Turn | None = TextTurn("OK")
        if "default" in data:
            default = None if data["default"] is None else _turn_from(data["default"], "default")
        usage = _usage_from(data["usage"], "usage") if "usage" in data else Usage()
        return cls(turns, default, usage)

    @classmethod
    def from_yaml(cls, path: str | Path) -> Script:
        """Load a YAML script file; a missing or malformed file raises ConfigError naming it."""
        what = "fake-anthropic script"
        return cls.from_dict(settings_file.decode(settings_file.read_text(path, what=what), source=f"{what} {path}"))
