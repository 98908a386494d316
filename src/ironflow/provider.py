"""What every sandbox backend offers: run a step, release a run, say which accounts it takes, close.

Backends that keep a sandbox open as a session (local, k8s, agent-sandbox) are also a
:class:`SessionProvider`: ``provider.sessions()`` hands out their
:class:`~ironflow.sessions.backend.SessionBackend`; :func:`sessions_of` asks any provider.

The engine and the CLI only see this protocol, so a step runs unchanged on the local
sandbox, an ephemeral pod or an agent-sandbox claim. There is one way to run a step,
``await provider.run(config)``; a provider holds clients (an API connection, an admin
client) that ``aclose()`` releases, so use it as ``async with provider: ...``. Scripts
without an event loop use :func:`run_sync`, the sync twin.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

from ironflow import errors

if TYPE_CHECKING:  # annotations only: a command's start-up need not load sessions or step values
    from ironflow.results import AgentResult
    from ironflow.sessions.backend import SessionBackend
    from ironflow.steps import AgentConfig

__all__ = [
    "ACCOUNT_KIND_CLAUDE_SUBSCRIPTION",
    "NO_PROXY_FOR_ACCOUNTS",
    "AgentProvider",
    "LogSink",
    "ProviderBase",
    "SessionProvider",
    "run_sync",
    "sessions_of",
]

#: The only account kind a provider reports, and only when credentials go through the proxy.
ACCOUNT_KIND_CLAUDE_SUBSCRIPTION = "claude_subscription"
#: Why an agent step given accounts is refused on a provider without an auth proxy (it would
#: otherwise run on the provider's own credential).
NO_PROXY_FOR_ACCOUNTS = (
    "accounts need the auth proxy: a subscription's token reaches the proxy only, never a sandbox, and this "
    "provider has none (set auth_proxy in the provider file, or run without --account)"
)


class LogSink(Protocol):
    """Receives output lines as they arrive; ``stream`` is ``stdout`` or ``stderr`` (the agent's), or
    ``ironflow`` (a note of the sandbox's own, e.g. an egress decision)."""

    def log(self, stream: str, line: str) -> None: ...


@runtime_checkable
class AgentProvider(Protocol):
    async def run(self, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
        """Run one step to completion and leave nothing behind; with ``logs``, the CLI streams
        stream-json and each line reaches the sink as it arrives."""
        ...

    async def release_run(self, run_id: str) -> int:
        """Remove everything of a run (and of runs whose root it is); returns sandboxes removed."""
        ...

    def account_kind(self) -> str | None:
        """The Provider Account kind this provider can use, or None."""
        ...

    async def aclose(self) -> None:
        """Close the clients this provider opened; it can be used again afterwards (it reopens them)."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@runtime_checkable
class SessionProvider(Protocol):
    """A provider whose sandboxes can also be kept open as sessions."""

    def sessions(self) -> SessionBackend:
        """This provider's sessions: its sandboxes, its settings, its cluster; close them with ``aclose``."""
        ...


def sessions_of(provider: AgentProvider) -> SessionBackend:
    """``provider.sessions()``, for a provider typed as any.

    Raises:
        StepConfigError: a provider without sandbox sessions.
    """
    if not isinstance(provider, SessionProvider):
        raise errors.StepConfigError(
            f"this provider has no sandbox sessions ({type(provider).__name__}; local, k8s and agent-sandbox have)"
        )
    return provider.sessions()


class ProviderBase:
    """``async with`` over :meth:`aclose`, for the backends (a provider with nothing to close
    keeps the default)."""

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def run_sync(provider: AgentProvider, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
    """Run one step from synchronous code (a script, a notebook cell without a loop) and close
    the provider's clients afterwards: the sync twin of ``async with provider: await provider.run(config)``.

    Raises:
        RuntimeError: called from inside a running event loop (await ``provider.run`` there).
    """

    import asyncio  # here: the command that imports this module may run nothing on an event loop

    async def _run() -> AgentResult:
        async with provider:
            return await provider.run(config, logs=logs)

    return asyncio.run(_run())
