"""Why an agent step's settings are refused, as pure checks: ``AgentConfig`` asks them when it is made,
so a value that can never work fails at the call that gave it, in one line."""

from __future__ import annotations

import re
import reprlib
from typing import Final, Protocol

from ironflow import labels

__all__ = [
    "SHORT",
    "conversation_problem",
    "environment_id_valid",
    "invalid_environment_id_message",
    "is_utf8",
    "role_problem",
    "scalar_type_problem",
]

_RESUME_ID = re.compile(r"[A-Za-z0-9_-]+")
_ENVIRONMENT_ID = re.compile(r"[a-z0-9-]{1,253}")


#: The scalar settings and the types each accepts (None: unset), checked first: the config's
#: other checks compare and call methods on these, so ``max_turns: "three"`` must not reach them.
_SCALAR_TYPES: Final[dict[str, tuple[type, ...]]] = {
    **dict.fromkeys(
        ("prompt", "system_prompt", "append_system_prompt", "model", "tool_profile", "working_dir", "mcp_config",
         "permission_mode", "resume_session_id", "session_id", "resume_environment_id", "trace_context", "role"),
        (str,),
    ),
    "max_turns": (int,),
    "max_budget_usd": (float, int),
    "timeout": (float, int),
    **dict.fromkeys(("strict_mcp_config", "bare", "verbose", "continue_session"), (bool,)),
}  # fmt: skip
_TYPE_NAMES: Final = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def role_problem(role: str | None) -> str | None:
    """Why ``role`` cannot be a step's role (it is a label value, never empty), or None."""
    if role is None:
        return None
    return labels.label_value_problem(labels.LABEL_ROLE, role) if role else "role must not be empty"


class _Conversation(Protocol):
    """The conversation settings of an ``AgentConfig``."""

    @property
    def resume_session_id(self) -> str | None: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def continue_session(self) -> bool: ...


def conversation_problem(config: _Conversation) -> str | None:
    """Why the conversation settings cannot go on Claude's command line together, or None."""
    for name in ("resume_session_id", "session_id"):
        value = getattr(config, name)
        if value is not None and not _RESUME_ID.fullmatch(value):
            return f"{name} must only hold [A-Za-z0-9_-], got {value!r}"
    if config.continue_session and (config.resume_session_id is not None or config.session_id is not None):
        return "continue_session carries on the latest conversation: leave out resume_session_id and session_id"
    return None


def scalar_type_problem(config: object) -> str | None:
    """The first scalar setting whose type is wrong, as one line (a step file's YAML types).

    >>> from types import SimpleNamespace
    >>> scalar_type_problem(SimpleNamespace(prompt=42))
    "step setting 'prompt' must be text, got 42"
    """
    for key, accepted in _SCALAR_TYPES.items():
        value = getattr(config, key, None)
        if value is None:
            continue
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
            return f"step setting '{key}' must be {_TYPE_NAMES[accepted[0]]}, got {SHORT.repr(value)}"
    return None


#: Values in messages are cut short: a hostile document may nest thousands of levels deep.
SHORT: Final = reprlib.Repr()
SHORT.maxlevel, SHORT.maxstring, SHORT.maxother = 2, 60, 60


def is_utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # lone surrogates, e.g. from undecodable argv bytes
        return False
    return True


def environment_id_valid(environment_id: str) -> bool:
    """A persistent environment id is a claim name ironflow could have made: ``[a-z0-9-]{1,253}``."""
    return _ENVIRONMENT_ID.fullmatch(environment_id) is not None


def invalid_environment_id_message(environment_id: str) -> str:
    return f"environment id must match [a-z0-9-]{{1,253}}, got {environment_id!r}"
