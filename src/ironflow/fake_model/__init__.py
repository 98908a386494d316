"""The offline Anthropic Messages API: what ``--fake-model`` and ``ironflow dev fake-anthropic`` serve.

A product feature, not a test double: workflows are built and demonstrated without a key,
and the real Claude Code CLI talks to it exactly as to the real API. ``script`` is pure
(turns, usage, the YAML form); ``server`` is the aiohttp app on loopback.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.fake_model.script import ErrorTurn, Script, TextTurn, ToolUseTurn, Usage
    from ironflow.fake_model.server import FakeAnthropic

__all__ = ["ErrorTurn", "FakeAnthropic", "Script", "TextTurn", "ToolUseTurn", "Usage"]

__getattr__ = lazy_exports(
    __name__,
    {"script": ("ErrorTurn", "Script", "TextTurn", "ToolUseTurn", "Usage"), "server": ("FakeAnthropic",)},
)
