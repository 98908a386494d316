"""What every sandbox backend offers: run a step, release a run, say which accounts it takes.

The engine and the CLI only see this protocol, so a step runs unchanged on the local
sandbox, an ephemeral pod or an agent-sandbox claim.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ironflow.steps import AgentConfig, AgentResult

__all__ = ["ACCOUNT_KIND_CLAUDE_SUBSCRIPTION", "AgentProvider", "LogSink"]

#: The only account kind a provider reports, and only when credentials go through the proxy.
ACCOUNT_KIND_CLAUDE_SUBSCRIPTION = "claude_subscription"


class LogSink(Protocol):
    """Receives output lines as they arrive; ``stream`` is ``stdout`` or ``stderr``."""

    def log(self, stream: str, line: str) -> None: ...


@runtime_checkable
class AgentProvider(Protocol):
    async def invoke(self, config: AgentConfig) -> AgentResult:
        """Run one step to completion and leave nothing behind."""
        ...

    async def invoke_with_logs(self, config: AgentConfig, sink: LogSink) -> AgentResult:
        """Like :meth:`invoke`, with stream-json lines handed to ``sink`` as they arrive."""
        ...

    async def release_run(self, run_id: str) -> int:
        """Remove everything of a run (and of runs whose root it is); returns pods deleted."""
        ...

    def account_kind(self) -> str | None:
        """The Provider Account kind this provider can use, or None."""
        ...
