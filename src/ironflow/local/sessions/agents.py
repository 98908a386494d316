"""Agent steps inside an open local session (:meth:`~ironflow.local.sessions.local_sessions.LocalSessions.agent`).

A session opened with ``agent=True`` has its own in-process auth proxy (one ``ifap_`` token for
the session, revoked when it closes) reached through the same relay as a step's sandbox; the
Claude credential stays in the proxy. Each agent step is one command of the session's runtime:
the Claude Code CLI the local provider runs, with the proxy's variables in that command's
environment only, in the session's working directory (its workspace when it has one), so
several agent steps and plain commands share one tree. Its output is parsed as a step's is.
"""

from __future__ import annotations

import contextlib
import os
import time

from ironflow import errors, step_timeouts
from ironflow.claude import command, output, rate_limits
from ironflow.egress import EgressPolicy
from ironflow.local.sandbox import environment, step_proxy
from ironflow.local.sandbox.environment import AGENT_KEEP_BYTES
from ironflow.local.sessions.provided import LocalSandbox
from ironflow.results import AgentResult
from ironflow.secrets import Secret
from ironflow.sessions.client import AsyncSandbox
from ironflow.steps import AgentConfig

__all__ = ["PROXY_SOCKET", "open_proxy", "run_agent"]

#: The session proxy's socket, in the session's private directory.
PROXY_SOCKET = "proxy.sock"
EGRESS_SOCKET = "egress.sock"


async def open_proxy(
    stack: contextlib.AsyncExitStack,
    provider: LocalSandbox,
    directory: str,
    *,
    run_id: str | None,
    ttl: float,
    agent: bool = True,
    egress: EgressPolicy | None = None,
) -> tuple[str, step_proxy.StepTokens, str | None]:
    """Serve the session's proxy (closed with ``stack``: the tokens revoked): with ``agent`` the
    provider's Claude credential's token, with an ``egress`` policy that opens something the egress
    proxy too (on the returned second socket). Returns the sockets and the tokens."""
    socket_path = os.path.join(directory, PROXY_SOCKET)
    egress_socket = os.path.join(directory, EGRESS_SOCKET) if environment.serves_egress(egress) else None
    issued = await stack.enter_async_context(
        step_proxy.step_session(
            provider.proxy_credential() if agent else None,
            (),
            socket_path=socket_path,
            run_id=run_id,
            step="session",
            expires_in=ttl + 60,
            max_connections=provider.limits.proxy_connections,
            egress=egress,
            egress_socket=egress_socket,
        )
    )
    return socket_path, issued, egress_socket


async def run_agent(
    sandbox: AsyncSandbox, provider: LocalSandbox, config: AgentConfig, token: Secret, *, working_dir: str
) -> AgentResult:
    """``config`` run by the Claude Code CLI as one command of ``sandbox``.

    Raises:
        AgentTimeout: it ran past the step's or the provider's timeout, the smaller (its process group is killed).
        StepConfigError, PromptTooLarge: the step cannot run as given.
        AgentError: the CLI or the model failed (as a local step's).
    """
    if config.workspace is not None:
        raise errors.StepConfigError("a session's agent step works in the session's workspace: open it with one")
    command.validate_prompt_size(config)
    args = command.build_args(config, allow_bypass=provider.bypass_allowed())
    stdin = config.prompt.encode() if command.prompt_via_stdin(config) else None
    script = command.agent_shell_command(
        args,
        claude_path=provider.claude_cli(),
        working_dir=config.working_dir or working_dir,
        prefix=command.trace_prefix(config.trace_context),
    )
    limit = step_timeouts.effective(config.timeout, provider.timeout)
    started = time.monotonic()
    done = await sandbox.commands.run(
        ["sh", "-c", script],
        env=environment.proxy_env(token.reveal()),
        stdin=stdin,
        timeout=limit.seconds,
        keep_bytes=AGENT_KEEP_BYTES,
    )
    wall_ms = int((time.monotonic() - started) * 1000)
    if done.timed_out:
        raise limit.timed_out()
    rate_limits.record_rate_limits(config, done.stdout)
    if done.exit_code == 0:
        return output.parse_output(done.stdout, config, wall_ms=wall_ms)
    return output.handle_nonzero_exit(done.exit_code, done.stdout, done.stderr, config, wall_ms=wall_ms)
