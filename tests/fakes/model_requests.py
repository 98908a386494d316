"""What the offline model server was asked: the prompt text of a recorded Messages request."""

from __future__ import annotations

from collections.abc import Mapping

from ironflow.fake_model.server import RecordedRequest

__all__ = ["first_user_text"]


def first_user_text(request: RecordedRequest) -> str:
    """All the text of the first user message of a Messages request: the step's prompt."""
    messages = request.body.get("messages", []) if isinstance(request.body, Mapping) else []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            parts = content if isinstance(content, list) else []
            return "".join(str(p.get("text", "")) for p in parts if isinstance(p, Mapping))
    return ""
