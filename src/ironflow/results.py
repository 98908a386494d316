"""What a step produced: its value, usage and cost, and (stream-json) the turns it took (pure).

Every backend returns an :class:`AgentResult` from ``provider.run``; ``claude.output`` builds
it from the CLI's output. Apart from :mod:`ironflow.steps` (what to ask) so a result can be
stored, compared and printed without the step that made it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ironflow import errors
from ironflow.workspaces import WorkspaceChanges

__all__ = ["AgentResult", "DebugMessage", "ToolCall", "ToolResult"]


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
