"""Run an agent step or a plain command in a single-use local sandbox (bubblewrap or gVisor).

The same ``AgentConfig`` as on Kubernetes, the same ``AgentResult`` and errors: the
command comes from :mod:`ironflow.claude.command`, the output is read by
:mod:`ironflow.claude.output`. Each run gets a fresh sandbox (see
:mod:`ironflow.local.sandbox.bwrap`, :mod:`ironflow.local.sandbox.gvisor`) and, when something is written for
it (the proxy socket, managed settings), a temp dir (:mod:`ironflow.local.workdirs`), both gone
when the call returns, on every path: success, failure, timeout, cancellation. The provider's
settings and their checks are :class:`~ironflow.local.sandbox_config.LocalSandboxConfig`'s, which
it inherits; a run's workspace is opened and finished by :mod:`ironflow.local.workspaces.step_workspaces`.

Credentials stay outside: an agent step gets an in-process auth proxy on a unix socket
(bridged to 127.0.0.1:<port> inside the sandbox's own network namespace) and only an
opaque ``ifap_`` token; the key is handed to the proxy, never to the sandbox. The provider's
relays (:mod:`ironflow.auth_proxy.relays`) reach every step, a command too, the same way: one
token per relay in ``IRONFLOW_RELAY_<NAME>_TOKEN``; the provider's ``egress`` policy opens the
egress proxy to every step too. Settings
that only mean something on Kubernetes are accepted, logged as a warning and listed in
``AgentResult.ignored_settings``. Sessions, the proxy's server, the offline model, the Claude
command's modules and tracing load when used, so a one-shot ``ironflow exec`` imports no HTTP stack
and nothing of an agent step's; a plain command it runs blocking (:meth:`LocalSandboxProvider.run_command_blocking`),
without asyncio.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ironflow import errors
from ironflow.command_result import CommandResult
from ironflow.local import workdirs
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import blocking_run, bwrap, environment, launch
from ironflow.local.sandbox import limits as sandbox_limits
from ironflow.local.sandbox.environment import (
    PROXY_PORT,
    Isolation,
    LocalProfile,
    ProxyCredential,
    ignored_settings,
    sandbox_env,
)
from ironflow.local.sandbox_config import DEFAULT_TIMEOUT_S, LocalSandboxConfig
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, LogSink, ProviderBase

if TYPE_CHECKING:
    from ironflow.egress import EgressPolicy
    from ironflow.local.sessions import local_sessions
    from ironflow.local.workspaces.copies import PreparedWorkspace
    from ironflow.results import AgentResult
    from ironflow.sessions.pools import PoolPolicy
    from ironflow.steps import AgentConfig, StepScope
    from ironflow.workspaces import Workspace, WorkspaceChanges

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "PROXY_PORT",
    "CommandResult",
    "Isolation",
    "LocalProfile",
    "LocalSandboxProvider",
    "ProxyCredential",
    "ignored_settings",
    "sandbox_env",
]

log = logging.getLogger("ironflow.local")


def _text(raw: bytes) -> str:
    """A sandbox's output as text; bytes that are not UTF-8 become U+FFFD, never an error."""
    return raw.decode(errors="replace")


class LocalSandboxProvider(LocalSandboxConfig, ProviderBase):
    """Agent steps and plain commands in a fresh bubblewrap (default) or gVisor sandbox.

    Built with the settings of :class:`~ironflow.local.sandbox_config.LocalSandboxConfig`
    (its ``Args`` name each one); this part runs steps and commands and releases them.
    """

    def account_kind(self) -> str | None:
        """Credentials always go through the in-process proxy, so accounts can be attached."""
        return ACCOUNT_KIND_CLAUDE_SUBSCRIPTION

    # -- plain commands --

    async def run_command(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        working_dir: str | None = None,
        read_only_mounts: Sequence[bwrap.ReadOnlyMount] = (),
        writable_mounts: Sequence[bwrap.WritableMount] = (),
        stdin: bytes | None = None,
        auth_proxy: bool = False,
        run_id: str | None = None,
        workspace: Workspace | None = None,
        on_output: launch.OutputSink | None = None,
        egress: EgressPolicy | None = None,
    ) -> CommandResult:
        """Run ``argv`` in a fresh sandbox; a non-zero exit is a result, not an error.

        No network at all, or with ``auth_proxy`` only the in-process proxy (the
        provider's credential, an opaque token in ``ANTHROPIC_AUTH_TOKEN``), as an
        agent step has. ``run_id`` lets :meth:`release_run` kill it. A ``workspace`` is its
        working directory at ``/workspace``; the result holds what it changed there.
        ``on_output`` hears each piece of output as it comes (``ironflow exec`` streams so). An
        ``egress`` policy (added to the provider's) that opens something sends ``HTTP(S)_PROXY``
        traffic through the egress proxy, which lets through what the policy allows; without
        ``auth_proxy`` the sandbox reaches it with an egress-only token (no Claude credential needed).

        Raises:
            CommandTimeout: it ran past ``timeout_s`` (its process tree is gone by then); the
                error holds what it wrote until then (``output``, ``stderr``: bytes, bounded).
            SandboxError: the sandbox runtime could not start it.
            StepConfigError: ``env`` names a credential variable.
            ConfigError: a mount this runtime cannot show (gVisor: none under a path its setup hides).
            WorkspaceRefused, WorkspaceUnsafe, WorkspaceConflict: see :mod:`ironflow.local.workspaces.copies`.
        """
        egress = self.egress_with(egress)
        limit = self.timeout if timeout_s is None else timeout_s
        run_env, mounts, writable = self._command_inputs(argv, env, read_only_mounts, writable_mounts, workspace)
        async with contextlib.AsyncExitStack() as stack:
            # A temp dir only when something goes in it (the proxy socket, managed settings, gVisor's
            # bundle, a workspace's copy).
            tmp: str | None = None
            proxied = auth_proxy or bool(self.relays) or environment.serves_egress(egress)
            needs_dir = proxied or workspace is not None or self.managed_settings is not None
            if needs_dir or self.isolation != "bwrap":  # gVisor's bundle, Docker's env file
                tmp = stack.enter_context(workdirs.run_dir(self.temp_dir))
            prepared: PreparedWorkspace | None = None
            stop_when: Callable[[], Awaitable[str]] | None = None
            if workspace is not None and tmp is not None:
                from ironflow.local.workspaces import bound
                from ironflow.workspaces import WORKSPACE_PATH

                prepared = await self._open_workspace(workspace, tmp)
                writable = (bwrap.WritableMount(prepared.copy, WORKSPACE_PATH), *writable)
                working_dir = working_dir or WORKSPACE_PATH
                stop_when = bound.stop_when(prepared)
            socket_path: str | None = None
            egress_socket: str | None = None
            if proxied and tmp is not None:
                from ironflow.local.sandbox import step_proxy  # a proxied command's: a plain one loads none of it

                socket_path = os.path.join(tmp, "proxy.sock")
                if environment.serves_egress(egress):
                    egress_socket = os.path.join(tmp, "egress.sock")
                issued = await stack.enter_async_context(
                    step_proxy.step_session(
                        self._credential(None) if auth_proxy else None,
                        self.relays,
                        socket_path=socket_path,
                        run_id=run_id,
                        step="command",
                        expires_in=limit + 60,
                        relay_upstream=self.relay_upstream,
                        max_connections=self.limits.proxy_connections,
                        egress=egress,
                        egress_socket=egress_socket,
                    )
                )
                run_env.update(issued.env())
            fds = stack.enter_context(sandbox_argv.sandbox_fds(self.isolation, run_env))
            full, binds = sandbox_argv.render(
                self.shape(),
                tuple(argv),
                tmp=tmp,
                working_dir=working_dir,
                mounts=mounts,
                writable=writable,
                proxy_socket=socket_path,
                env=run_env,
                fds=fds,
                managed=self.managed_settings,
                egress_socket=egress_socket,
            )
            start = time.monotonic()
            finished = await self.processes.run(
                full,
                stdin=stdin,
                limit_s=limit,
                sink=None,
                run_ids=frozenset({run_id} if run_id else ()),
                pass_fds=fds.inherited,
                binds=binds,
                on_output=on_output,
                keep_bytes=self.output_keep_bytes,
                stop_when=stop_when,
            )
            if finished.stopped is not None:
                raise errors.WorkspaceUnsafe(finished.stopped)
            code, out, err = self._command_output(finished, limit)
            changes = None
            if prepared is not None:
                changes = await self._close_workspace(prepared, code == 0, "exec", " ".join(argv))
        killed = self._memory_killed(finished)
        return CommandResult(code, out, err, time.monotonic() - start, changes, *finished.sizes, killed=killed)

    def runs_blocking(self, workspace: Workspace | None = None) -> bool:
        """Whether :meth:`run_command_blocking` can run a command with no ``auth_proxy`` and no
        ``egress`` of its own: bubblewrap, and nothing to serve it or write for it (a workspace,
        the provider's relays or egress, managed settings)."""
        return (
            self.isolation == "bwrap"
            and workspace is None
            and not self.relays
            and not environment.serves_egress(self.egress_with(None))
            and self.managed_settings is None
        )

    def run_command_blocking(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        read_only_mounts: Sequence[bwrap.ReadOnlyMount] = (),
        writable_mounts: Sequence[bwrap.WritableMount] = (),
        on_output: launch.OutputSink | None = None,
    ) -> CommandResult:
        """A plain command as :meth:`run_command` runs it, waiting in this thread with no event loop,
        where :meth:`runs_blocking` says it can: for a process that runs this one sandbox and nothing
        else (``ironflow exec``, which then never imports asyncio). The same sandbox, limits, result
        and errors.

        Raises:
            ConfigError: :meth:`runs_blocking` says no, or as :meth:`run_command`.
        """
        if not self.runs_blocking():
            raise errors.ConfigError("this provider's commands need its event loop: use run_command")
        limit = self.timeout if timeout_s is None else timeout_s
        run_env, mounts, writable = self._command_inputs(argv, None, read_only_mounts, writable_mounts, None)
        with sandbox_argv.sandbox_fds(self.isolation, run_env) as fds:
            full, binds = sandbox_argv.render(
                self.shape(), tuple(argv), tmp=None, working_dir=None, mounts=mounts, writable=writable,
                proxy_socket=None, env=run_env, fds=fds, managed=None, egress_socket=None,
            )  # fmt: skip
            start = time.monotonic()
            finished = blocking_run.run(
                self.processes, full, stdin=stdin, limit_s=limit, pass_fds=fds.inherited, binds=binds,
                on_output=on_output, keep_bytes=self.output_keep_bytes,
            )  # fmt: skip
        code, out, err = self._command_output(finished, limit)
        killed = self._memory_killed(finished)
        return CommandResult(code, out, err, time.monotonic() - start, None, *finished.sizes, killed=killed)

    def _command_inputs(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        read_only_mounts: Sequence[bwrap.ReadOnlyMount],
        writable_mounts: Sequence[bwrap.WritableMount],
        workspace: Workspace | None,
    ) -> tuple[dict[str, str], tuple[bwrap.ReadOnlyMount, ...], tuple[bwrap.WritableMount, ...]]:
        """A command's environment and mounts, each checked before anything starts."""
        if not argv:
            raise errors.ConfigError("run_command needs a command")
        run_env = environment.sandbox_env({**self.env, **(env or {})})  # refuses credential variables
        mounts = tuple(read_only_mounts)
        for mount in mounts:
            problem = sandbox_argv.mount_problem(self.isolation, mount)
            if problem is not None:
                raise errors.ConfigError(problem)
        writable = tuple(writable_mounts)
        if writable or workspace is not None:  # with neither, a plain command loads no workspace module
            from ironflow.local.workspaces import copies

            copies.check_mounts(self.isolation, self._writable_uid, writable, mounts, workspace)
        return run_env, mounts, writable

    def _command_output(self, finished: launch.Finished, limit: float) -> tuple[int, str, str]:
        """A finished command's exit code and output as text; past its limit, or refused by the
        sandbox runtime itself, raised."""
        if finished.timed_out:
            raise errors.CommandTimeout(limit, output=finished.stdout, stderr=finished.stderr)
        out, err = _text(finished.stdout), _text(finished.stderr)
        code = sandbox_argv.command_exit_code(finished.code, err)
        sandbox_argv.raise_if_sandbox_failed(code, err, self.isolation)
        return code, out, err

    def _memory_killed(self, finished: launch.Finished) -> str | None:
        """Why the kernel killed some of its processes (its memory limit), or None."""
        if not finished.memory_kills:
            return None
        return sandbox_limits.memory_kill_message(self.limits.memory_bytes, finished.memory_kills)

    # -- agent steps --

    async def run(self, config: AgentConfig, *, logs: LogSink | None = None) -> AgentResult:
        """Run one agent step to completion and leave nothing behind; with ``logs``, in
        stream-json, each line handed to the sink as it arrives."""
        if logs is None:
            return await self._invoke(config, None)
        return await self._invoke(config.replace(verbose=True), logs)

    async def release_run(self, run_id: str) -> int:
        """Kill every sandbox of ``run_id`` still running (returns how many were killed); its
        workspaces kept for a retry go too."""
        self.kept.release(run_id)
        return await self.processes.kill_run(run_id)

    async def release_step(self, scope: StepScope) -> int:
        """Kill the sandboxes of an earlier attempt of this step still running in this process
        (a retry on the same worker starts with none), returns how many."""
        return await self.processes.kill_run(launch.step_key(scope))

    async def _invoke(self, config: AgentConfig, sink: LogSink | None) -> AgentResult:
        import hashlib  # an agent step's, as all below: a plain command (``ironflow exec``) loads none

        from ironflow import step_timeouts, tracing
        from ironflow.claude import command, output, profile, rate_limits
        from ironflow.local.sandbox import step_proxy
        from ironflow.local.workspaces import bound, copies
        from ironflow.workspaces import WORKSPACE_PATH

        command.validate_prompt_size(config)
        args = command.build_args(config, allow_bypass=self.bypass_allowed())
        ignored = environment.ignored_settings(config, isolation=self.isolation, presets=self.managed_settings_presets)
        managed = environment.managed_settings_for(config, self.managed_settings, self.managed_settings_presets)
        if ignored:
            log.warning("local sandbox ignores settings that only apply on Kubernetes: %s", "; ".join(ignored))
        mounts = self._step_mounts(config)
        copies.check_mounts(self.isolation, self._writable_uid, (), mounts, config.workspace)
        credential = self._credential(config)
        claude = self.claude_cli()
        stdin = config.prompt.encode() if command.prompt_via_stdin(config) else None
        prefix = command.trace_prefix(config.trace_context) + profile.profile_copy_prefix(
            [profile.ClaudeProfile(os.path.basename(p.path) or "profile", p.subdir) for p in self.profiles]
        )
        workdir = config.working_dir or (WORKSPACE_PATH if config.workspace is not None else None)
        script = command.agent_shell_command(args, claude_path=claude, working_dir=workdir, prefix=prefix)
        run_id = config.scope.run_id if config.scope is not None else None
        step = config.scope.step if config.scope is not None else "agent"
        limit = step_timeouts.effective(config.timeout, self.timeout)
        async with contextlib.AsyncExitStack() as stack:
            tmp = stack.enter_context(workdirs.run_dir(self.temp_dir))
            prepared = await stack.enter_async_context(self.kept.attempt(config, tmp, self._open_workspace))
            writable = () if prepared is None else (bwrap.WritableMount(prepared.copy, WORKSPACE_PATH),)
            socket_path = os.path.join(tmp, "proxy.sock")
            egress = self.egress_with(None)
            egress_socket = os.path.join(tmp, "egress.sock") if environment.serves_egress(egress) else None
            async with step_proxy.step_session(
                credential,
                self.relays,
                socket_path=socket_path,
                run_id=run_id,
                step=step,
                expires_in=limit.seconds + 60,
                trace_context=config.trace_context,
                relay_upstream=self.relay_upstream,
                max_connections=self.limits.proxy_connections,
                egress=egress,
                egress_socket=egress_socket,
                on_egress=None if sink is None else functools.partial(sink.log, "ironflow"),
            ) as issued:
                assert issued.claude is not None  # a credential was given
                token_id = hashlib.sha256(issued.claude.reveal().encode()).hexdigest()[:12]
                log.info("local sandbox step started: isolation=%s token=%s", self.isolation, token_id)
                env = {**environment.sandbox_env(self.env), **issued.env()}
                with (
                    tracing.span("ironflow.sandbox", parent=config.trace_context, isolation=self.isolation) as span,
                    sandbox_argv.sandbox_fds(self.isolation, env) as fds,
                ):
                    full, binds = sandbox_argv.render(
                        self.shape(),
                        ("sh", "-c", script),
                        tmp=tmp,
                        working_dir=None,
                        mounts=mounts,
                        writable=writable,
                        proxy_socket=socket_path,
                        env=env,
                        extra_tools=(claude,),
                        fds=fds,
                        managed=managed,
                        egress_socket=egress_socket,
                    )
                    start = time.monotonic()
                    finished = await self.processes.run(
                        full,
                        stdin=stdin,
                        limit_s=limit.seconds,
                        sink=sink,
                        run_ids=launch.release_keys(config.scope),
                        pass_fds=fds.inherited,
                        binds=binds,
                        keep_bytes=environment.AGENT_KEEP_BYTES,
                        stop_when=bound.stop_when(prepared),
                    )
                    span.set(exit_code=finished.code, timed_out=finished.timed_out)
                wall_ms = int((time.monotonic() - start) * 1000)
            if finished.stopped is not None:
                raise errors.WorkspaceUnsafe(finished.stopped)
            if finished.timed_out:
                log.info("local sandbox step timed out: bound=%s token=%s", limit.source, token_id)
                raise limit.timed_out()
            code, out, err = finished.code, _text(finished.stdout), _text(finished.stderr)
            log.info("local sandbox step finished: exit_code=%d token=%s", code, token_id)
            rate_limits.record_rate_limits(config, out)
            sandbox_argv.raise_if_sandbox_failed(code, err, self.isolation)
            if code != 0 and finished.memory_kills:
                said = sandbox_limits.memory_kill_message(self.limits.memory_bytes, finished.memory_kills)
                raise errors.SandboxFailed(f"the {self.isolation} sandbox", "OOMKilled", said, started=True)
            if code == 0:
                result = output.parse_output(out, config, wall_ms=wall_ms)
            else:
                result = output.handle_nonzero_exit(code, out, err, config, wall_ms=wall_ms)
            changes = None if prepared is None else await self._close_workspace(prepared, True, step, config.prompt)
        account_id = config.account.account_id if config.account is not None else result.account_id
        return dataclasses.replace(result, ignored_settings=ignored, account_id=account_id, workspace=changes)

    def egress_with(self, extra: EgressPolicy | None) -> EgressPolicy | None:
        """The provider's policy with a command's or a session's own added (either may be missing)."""
        if self.egress is None or extra is None:
            return extra if self.egress is None else self.egress
        return self.egress.merged(extra)

    async def _open_workspace(self, spec: Workspace, tmp: str) -> PreparedWorkspace:
        from ironflow.local.workspaces import step_workspaces  # a workspace's run: git's sync with it

        return await step_workspaces.open_workspace(
            spec, tmp, processes=self.processes, shape=self.shape(), hosts=self.git_hosts, limit_s=self.timeout
        )

    async def _close_workspace(
        self, prepared: PreparedWorkspace, succeeded: bool, what: str, text: str
    ) -> WorkspaceChanges:
        """Finish ``prepared``; a push's commit says ``what`` made the change and the first line of ``text``."""
        from ironflow import workspaces
        from ironflow.local.workspaces import step_workspaces

        return await step_workspaces.close_workspace(
            prepared,
            succeeded,
            workspaces.push_message(what, text),
            processes=self.processes,
            shape=self.shape(),
            hosts=self.git_hosts,
            limit_s=self.timeout,
        )

    def sessions(
        self, *, state_dir: str | None = None, pool: PoolPolicy | None = None, keep_sessions: bool = False
    ) -> local_sessions.LocalSessions:
        """This provider's sandbox sessions, in its sandbox (``state_dir``: where their sockets go;
        ``pool``: sandboxes kept warm for them; ``keep_sessions``: they outlive this process, bubblewrap
        only); under Docker, containers (a worker running as root).

        Their module (and its HTTP client) loads here: a one-shot step or command never needs it."""
        from ironflow.local.sessions import local_sessions

        return local_sessions.LocalSessions(self, state_dir=state_dir, pool=pool, keep_sessions=keep_sessions)
