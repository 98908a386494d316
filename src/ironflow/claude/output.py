"""Claude Code's ``json`` and ``stream-json`` output into an :class:`AgentResult` (pure).

Functions of their inputs only: the CLI's text, the step's config and the wall-clock
time the caller measured. They never run anything and never log. The error mapping
follows the reference (§1.9, §1.10):

======================================  ==============================================
CLI output                              outcome
======================================  ==============================================
not JSON                                ``SchemaValidation`` (expected ClaudeJsonOutput)
``is_error`` and subtype not error_*    ``ApiError`` (status, code, message = result)
subtype ``error_max_budget_usd``        ``BudgetExceeded`` (when no value was found)
schema set, no JSON value anywhere      ``SchemaValidation`` (structured_output field)
stream-json without a result line       ``SchemaValidation`` (stream-json result line)
non-zero exit, nothing usable           ``ProcessFailed`` (exit code, output truncated)
======================================  ==============================================

The model is the first key of ``modelUsage`` in the CLI's own order (the reference's
serde map sorts keys, which would pick ``claude-haiku-*`` side calls over the step's
model), else the ``system/init`` line's ``model`` in stream-json.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import errors, results, steps

__all__ = [
    "MAX_TURNS_HINT",
    "PartialUsage",
    "handle_nonzero_exit",
    "parse_output",
    "parse_response",
    "parse_stream_response",
]

MAX_TURNS_HINT: Final = (
    " (max turns reached before structured output was generated - use max_turns >= 2 with structured output)"
)
_NO_OUTPUT: Final = "(no output captured)"
_JSON_FENCE: Final = re.compile(r"```json\s*(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class PartialUsage:
    """What a failed run still reported (``SchemaValidation.partial``): cost, tokens, time."""

    session_id: str | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None

    @property
    def has_usage(self) -> bool:
        """The CLI got far enough to report cost or duration (the reference's test)."""
        return self.cost_usd is not None or self.duration_ms is not None


class _Malformed(Exception):
    """A field of the result object has the wrong type."""


def _field(obj: Mapping[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise _Malformed(f"field '{key}' must be {_kind_name(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise _Malformed(f"field '{key}' must be {_kind_name(kinds)}, got {type(value).__name__}")
    return value


def _kind_name(kinds: type | tuple[type, ...]) -> str:
    names = [k.__name__ for k in (kinds if isinstance(kinds, tuple) else (kinds,))]
    return " or ".join(names)


def _number(obj: Mapping[str, Any], key: str) -> float | int | None:
    value = _field(obj, key, (int, float))
    if isinstance(value, float) and not math.isfinite(value):  # json accepts NaN and 1e400
        raise _Malformed(f"field '{key}' must be a finite number, got {value}")
    return value  # type: ignore[no-any-return]


def _int(obj: Mapping[str, Any], key: str) -> int | None:
    value = _number(obj, key)
    return None if value is None else int(value)


def _float(obj: Mapping[str, Any], key: str) -> float | None:
    value = _number(obj, key)
    return None if value is None else float(value)


def _first_model(obj: Mapping[str, Any]) -> str | None:
    usage = obj.get("modelUsage")
    if isinstance(usage, Mapping):
        return next((k for k in usage if isinstance(k, str) and k), None)
    return None


def _structured_value(obj: Mapping[str, Any]) -> tuple[bool, Any]:
    """The first JSON value found, in the reference's order; (False, None) when none."""
    if obj.get("structured_output") is not None:
        return True, obj["structured_output"]
    result = obj.get("result")
    if result is None:
        return False, None
    if not isinstance(result, str):
        return True, result
    candidates = [result]
    fence = _JSON_FENCE.search(result)
    if fence:
        candidates.append(fence.group(1))
    start, end = result.find("{"), result.rfind("}")
    if start != -1 and end > start:
        candidates.append(result[start : end + 1])
    for candidate in candidates:
        try:
            return True, json.loads(candidate)
        except json.JSONDecodeError:
            continue
    return False, None


def _parse_object(
    text: str,
    config: steps.AgentConfig,
    *,
    wall_ms: int,
    model_hint: str | None = None,
    debug: tuple[results.DebugMessage, ...] | None = None,
) -> results.AgentResult:
    try:
        obj = json.loads(text)
        if not isinstance(obj, Mapping):
            raise _Malformed(f"expected a JSON object, got {type(obj).__name__}")
        usage = _field(obj, "usage", Mapping)
        session_id = _field(obj, "session_id", str)
        subtype = _field(obj, "subtype", str) or ""
        cost = _float(obj, "total_cost_usd")
        cli_duration = _int(obj, "duration_ms")
        is_error = bool(_field(obj, "is_error", bool))
        status = _int(obj, "api_error_status")
        code = _field(obj, "api_error_code", str) or _field(obj, "api_error_type", str)
        input_tokens = _int(usage, "input_tokens") if usage is not None else None
        output_tokens = (_int(usage, "output_tokens") or 0) if usage is not None else None
        cache_read = _int(usage, "cache_read_input_tokens") if usage is not None else None
        cache_creation = _int(usage, "cache_creation_input_tokens") if usage is not None else None
    except (json.JSONDecodeError, _Malformed) as exc:
        raise errors.SchemaValidation(
            "ClaudeJsonOutput", f"parse error: {exc}", raw_response=text, debug_messages=debug
        ) from None
    model = _first_model(obj) or model_hint

    if is_error and not subtype.startswith("error_"):
        result_text = obj.get("result")
        message = result_text if isinstance(result_text, str) else ""
        raise errors.ApiError(status, code, message)

    def budget() -> errors.BudgetExceeded:
        return errors.BudgetExceeded(cost or 0.0, config.max_budget_usd or 0.0, debug_messages=debug)

    if config.json_schema is not None:
        found, value = _structured_value(obj)
        if not found:
            if subtype == "error_max_budget_usd":
                raise budget()
            hint = MAX_TURNS_HINT if subtype == "error_max_turns" else ""
            partial = PartialUsage(session_id, cost, cli_duration, input_tokens, output_tokens, model)
            raise errors.SchemaValidation(
                "structured_output field", "null" + hint, raw_response=text, partial=partial, debug_messages=debug
            )
    else:
        if subtype == "error_max_budget_usd":
            raise budget()
        result = obj.get("result")
        value = "" if result is None else result

    return results.AgentResult(
        value=value,
        duration_ms=cli_duration if cli_duration is not None else wall_ms,
        session_id=session_id,
        cost_usd=cost,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_input_tokens=cache_read,
        cache_creation_input_tokens=cache_creation,
        model=model,
        debug_messages=debug,
    )


def parse_response(text: str, config: steps.AgentConfig, *, wall_ms: int) -> results.AgentResult:
    """Read ``--output-format json`` (one result object) into a result, or raise its error."""
    return _parse_object(text.strip(), config, wall_ms=wall_ms)


# --- stream-json -------------------------------------------------------------------------


@dataclass
class _Turn:
    """A debug turn being assembled from consecutive assistant lines."""

    texts: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    thinking_redacted: bool = False
    tool_calls: list[results.ToolCall] = field(default_factory=list)
    tool_results: list[results.ToolResult] = field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    closed: bool = False

    def add(self, message: Mapping[str, Any]) -> None:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                self.texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                self.thinking.append(block["thinking"])
            elif kind == "redacted_thinking":
                self.thinking_redacted = True
            elif kind == "tool_use":
                self.tool_calls.append(
                    results.ToolCall(str(block.get("id", "")), str(block.get("name", "")), block.get("input"))
                )
        if isinstance(message.get("stop_reason"), str):
            self.stop_reason = message["stop_reason"]
            self.closed = True
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            for key in ("input_tokens", "output_tokens"):
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    setattr(self, key, value)

    def freeze(self) -> results.DebugMessage:
        return results.DebugMessage(
            text="\n".join(self.texts) if self.texts else None,
            thinking="\n".join(self.thinking) if self.thinking else None,
            thinking_redacted=self.thinking_redacted,
            tool_calls=tuple(self.tool_calls),
            tool_results=tuple(self.tool_results),
            stop_reason=self.stop_reason,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
        )


def _attach_results(turns: list[_Turn], callers: Mapping[str, _Turn], message: Mapping[str, Any]) -> None:
    """Give each ``tool_result`` to the turn that made the call (``callers``: id → turn), else the last."""
    content = message.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping) or block.get("type") != "tool_result":
            continue
        result = results.ToolResult(
            str(block.get("tool_use_id", "")), block.get("content"), bool(block.get("is_error"))
        )
        owner = callers.get(result.tool_use_id) or (turns[-1] if turns else None)
        if owner is not None:
            owner.tool_results.append(result)


def parse_stream_response(text: str, config: steps.AgentConfig, *, wall_ms: int) -> results.AgentResult:
    """Read ``--output-format stream-json --verbose`` output: debug turns plus the last result line.

    Lines that are not JSON objects are skipped (the pod log may mix in stderr).
    """
    turns: list[_Turn] = []
    callers: dict[str, _Turn] = {}
    result_line: str | None = None
    model_hint: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, Mapping):
            continue
        kind = obj.get("type")
        message = obj.get("message")
        if kind == "system" and obj.get("subtype") == "init":
            if isinstance(obj.get("model"), str) and model_hint is None:
                model_hint = obj["model"]
        elif kind == "assistant" and isinstance(message, Mapping):
            if not turns or turns[-1].closed:
                turns.append(_Turn())
            turns[-1].add(message)
            callers.update((call.id, turns[-1]) for call in turns[-1].tool_calls)
            if model_hint is None and isinstance(message.get("model"), str):
                model_hint = message["model"]
        elif kind == "user" and isinstance(message, Mapping):
            if turns:
                turns[-1].closed = True
            _attach_results(turns, callers, message)
        elif kind == "result":
            result_line = line
    debug = tuple(t.freeze() for t in turns)
    if result_line is None:
        raise errors.SchemaValidation(
            "stream-json result line",
            "no result line found in stream output",
            raw_response=text,
            debug_messages=debug,
        )
    return _parse_object(result_line, config, wall_ms=wall_ms, model_hint=model_hint, debug=debug)


def parse_output(text: str, config: steps.AgentConfig, *, wall_ms: int) -> results.AgentResult:
    """``parse_stream_response`` when the step ran verbose (stream-json), else ``parse_response``."""
    if config.verbose:
        return parse_stream_response(text, config, wall_ms=wall_ms)
    return parse_response(text, config, wall_ms=wall_ms)


def handle_nonzero_exit(
    code: int, stdout: str, stderr: str, config: steps.AgentConfig, *, wall_ms: int
) -> results.AgentResult:
    """What a non-zero exit means: a result the CLI still printed, its error, or ``ProcessFailed``.

    As the reference does, a parseable success is returned as a success; budget and API
    errors, and schema failures that carry usage, are raised as themselves.
    """
    text = stdout if stdout.strip() else stderr
    if text.strip():
        try:
            return parse_output(text, config, wall_ms=wall_ms)
        except (errors.BudgetExceeded, errors.ApiError):
            raise
        except errors.SchemaValidation as exc:
            if isinstance(exc.partial, PartialUsage) and exc.partial.has_usage:
                raise
    raise errors.ProcessFailed(code, text if text.strip() else _NO_OUTPUT)
