"""What a step produced: its value, usage and cost, and (stream-json) the turns it took (pure).

Every backend returns an :class:`AgentResult` from ``provider.run``; ``claude.output`` builds
it from the CLI's output. Apart from :mod:`ironflow.steps` (what to ask) so a result can be
stored, compared and printed without the step that made it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors
from ironflow.command_result import CommandResult  # its own module: a command's path creates no agent result class

if TYPE_CHECKING:
    from ironflow.workspaces import WorkspaceChanges

__all__ = [
    "AGENT_RESULT_MARK",
    "AgentResult",
    "CommandResult",
    "DebugMessage",
    "ToolCall",
    "ToolResult",
    "result_from_dict",
    "result_to_dict",
    "shown_usd",
]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    input: Any


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    content: Any
    is_error: bool = False


@dataclass(frozen=True)
class DebugMessage:
    """One assistant turn of a stream-json run, with the tool results it received."""

    text: str | None = None
    thinking: str | None = None
    thinking_redacted: bool = False
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class AgentResult:
    """What a step produced. ``value`` is the text, or the structured value with a schema."""

    value: Any
    duration_ms: int
    session_id: str | None = None
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    model: str | None = None
    debug_messages: tuple[DebugMessage, ...] | None = None
    account_id: str | None = None
    environment_id: str | None = None
    #: Settings the provider accepted but cannot apply (e.g. a runtime class locally).
    ignored_settings: tuple[str, ...] = ()
    #: What the step changed in its workspace (a step given one), as a patch.
    workspace: WorkspaceChanges | None = None

    @property
    def text(self) -> str:
        """The answer as text; empty when the value is structured."""
        return self.value if isinstance(self.value, str) else ""

    def json(self) -> Any:
        """The structured value; a text value is parsed as JSON."""
        if isinstance(self.value, str):
            try:
                return json.loads(self.value)
            except json.JSONDecodeError as exc:
                raise errors.SchemaValidation("JSON value", f"parse error: {exc}") from None
        return self.value


def shown_usd(usd: float) -> float:
    """A dollar figure as it is shown (``-o json``, a log line): 6 significant digits. A cost the
    Claude CLI reports, and any sum of costs, carries float noise a dollar figure does not need.

    >>> shown_usd(7.000000000000001e-05), shown_usd(0.1 + 0.2), shown_usd(12.3456789)
    (7e-05, 0.3, 12.3457)
    """
    return float(f"{usd:.6g}")


# --- AgentResult <-> dict: the JSON form a store or a workflow history keeps -----------------

AGENT_RESULT_MARK: Final = "__ironflow_agent_result__"


def result_to_dict(result: AgentResult) -> dict[str, Any]:
    """An ``AgentResult`` as JSON, marked so :func:`result_from_dict` knows it on replay."""
    out = dataclasses.asdict(result)
    out["ignored_settings"] = list(result.ignored_settings)
    out["workspace"] = None if result.workspace is None else result.workspace.to_json()
    if result.debug_messages is not None:
        out["debug_messages"] = [dataclasses.asdict(m) for m in result.debug_messages]
    out[AGENT_RESULT_MARK] = 1
    return out


def _debug_message(data: Mapping[str, Any]) -> DebugMessage:
    return DebugMessage(
        text=data.get("text"),
        thinking=data.get("thinking"),
        thinking_redacted=bool(data.get("thinking_redacted", False)),
        tool_calls=tuple(ToolCall(**c) for c in data.get("tool_calls", ())),
        tool_results=tuple(ToolResult(**r) for r in data.get("tool_results", ())),
        stop_reason=data.get("stop_reason"),
        input_tokens=data.get("input_tokens"),
        output_tokens=data.get("output_tokens"),
    )


def result_from_dict(data: Any) -> Any:
    """The stored form back: an ``AgentResult`` when marked, any other JSON value as is."""
    if not isinstance(data, Mapping) or data.get(AGENT_RESULT_MARK) != 1:
        return data
    fields = {f.name for f in dataclasses.fields(AgentResult)}
    kwargs = {k: v for k, v in data.items() if k in fields}
    if kwargs.get("debug_messages") is not None:
        kwargs["debug_messages"] = tuple(_debug_message(m) for m in kwargs["debug_messages"])
    kwargs["ignored_settings"] = tuple(kwargs.get("ignored_settings", ()))
    if kwargs.get("workspace") is not None:
        from ironflow.workspaces import WorkspaceChanges  # a stored change set only: a command's result loads none

        kwargs["workspace"] = WorkspaceChanges.from_json(kwargs["workspace"])
    return AgentResult(**kwargs)
