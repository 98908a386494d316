"""Run an agent step or a plain command in a single-use local sandbox (bubblewrap or gVisor).

The same ``AgentConfig`` as on Kubernetes, the same ``AgentResult`` and errors: the
command comes from :mod:`ironflow.claude.command`, the output is read by
:mod:`ironflow.claude.output`. Each run gets a fresh sandbox (see
:mod:`ironflow.local.sandbox.bwrap`, :mod:`ironflow.local.sandbox.gvisor`) and, when something is written for
it (the proxy socket, managed settings), a temp dir (:mod:`ironflow.local.workdirs`), both gone
when the call returns, on every path: success, failure, timeout, cancellation.

Credentials stay outside: an agent step gets an in-process auth proxy on a unix socket
(bridged to 127.0.0.1:<port> inside the sandbox's own network namespace) and only an
opaque ``ifap_`` token; the key is handed to the proxy, never to the sandbox. Settings
that only mean something on Kubernetes are accepted, logged as a warning and listed in
``AgentResult.ignored_settings``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from ironflow import errors, tracing, workspaces
from ironflow._renamed import renamed_argument
from ironflow.captured import DEFAULT_KEEP_BYTES
from ironflow.claude import cli, command, layout, output, profile, rate_limits
from ironflow.local import workdirs
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, cgroups, environment, identity, launch, step_proxy
from ironflow.local.sandbox import limits as sandbox_limits
from ironflow.local.sandbox.environment import (
    PROXY_PORT,
    Isolation,
    LocalProfile,
    ProxyCredential,
    ignored_settings,
    sandbox_env,
)
from ironflow.local.sessions import local_sessions
from ironflow.local.workspaces import bound, git_sync, writeback
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.local.workspaces import kept as kept_workspaces
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION, LogSink, ProviderBase
from ironflow.results import AgentResult, CommandResult
from ironflow.secrets import Secret
from ironflow.step_sandbox import HostPathSource, validate_sub_path
from ironflow.steps import AgentConfig, StepScope
from ironflow.workspaces import WORKSPACE_PATH, Workspace, WorkspaceChanges

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

DEFAULT_TIMEOUT_S: Final = 600.0


def _text(raw: bytes) -> str:
    """A sandbox's output as text; bytes that are not UTF-8 become U+FFFD, never an error."""
    return raw.decode(errors="replace")


class LocalSandboxProvider(ProviderBase):
    """Agent steps and plain commands in a fresh bubblewrap (default) or gVisor sandbox.

    Args:
        isolation: ``"bwrap"`` or ``"gvisor"`` (``runsc``).
        timeout: seconds a step may run; past it the whole process tree is killed.
        credential: the key the in-process proxy injects; None reads the worker's
            ``CLAUDE_CODE_OAUTH_TOKEN`` then ``ANTHROPIC_API_KEY`` at invocation (§6.8).
        managed_settings: a managed-settings document mounted read-only at /etc/claude-code.
        managed_settings_presets: named documents a step picks with
            ``AgentConfig.managed_settings(name)`` (the local counterpart of preset ConfigMaps).
        profiles: host directories copied into ``~/.claude`` before the CLI starts.
        env: extra plain variables for the sandbox (credential names are refused).
        allow_bypass: the ``IRONFLOW_ALLOW_BYPASS`` decision; None reads the worker's env.
        conversations_dir: a host directory kept as ``~/.claude/projects`` (Claude Code's
            conversations) across steps, so ``resume_session_id`` finds its conversation (bubblewrap
            only; the pod's conversations claim). ``sessions_dir`` is its old name (warns).
        temp_dir: where each run's temp dir (settings, proxy socket) is made; default the
            system's. Keep it short: a unix socket path holds at most 107 bytes. The ones left
            there by a worker that was killed are removed at start (:mod:`ironflow.local.workdirs`).
        limits: what each sandbox may use (processes, memory, CPU, open files, file size);
            :meth:`limits_report` says which hold on this machine and how.
        sandbox_host_uid: on a root worker, the non-root host uid a bubblewrap sandbox runs as
            (so root-only host files stay unreadable); ignored otherwise.
        git_hosts: the git hosts' credentials (kept in the proxy) for git workspaces.
        output_keep_bytes: bytes of the start, and of the end, of each stream a command's result
            keeps; the rest is counted, not held (``CommandResult.stdout_cut``).
    """

    def __init__(
        self,
        *,
        isolation: environment.Isolation = "bwrap",
        timeout: float = DEFAULT_TIMEOUT_S,
        credential: environment.ProxyCredential | None = None,
        managed_settings: Mapping[str, Any] | None = None,
        managed_settings_presets: Mapping[str, Mapping[str, Any]] | None = None,
        profiles: Sequence[environment.LocalProfile] = (),
        env: Mapping[str, str] | None = None,
        home_size_bytes: int = bwrap.DEFAULT_HOME_SIZE_BYTES,
        tmp_size_bytes: int = bwrap.DEFAULT_TMP_SIZE_BYTES,
        claude_path: str | None = None,
        allow_bypass: bool | None = None,
        conversations_dir: str | None = None,
        sessions_dir: str | None = None,
        temp_dir: str | None = None,
        limits: sandbox_limits.SandboxLimits = sandbox_limits.DEFAULT_LIMITS,
        sandbox_host_uid: int = identity.DEFAULT_HOST_UID,
        git_hosts: git_sync.GitHosts | None = None,
        output_keep_bytes: int = DEFAULT_KEEP_BYTES,
    ) -> None:
        if isolation not in ("bwrap", "gvisor"):
            raise errors.ConfigError(f"isolation must be 'bwrap' or 'gvisor', got '{isolation}'")
        if not timeout > 0:
            raise errors.ConfigError(f"timeout must be a positive number of seconds, got {timeout}")
        for p in profiles:
            reason = profile.validate_profile_subdir(p.subdir)
            if reason is not None:
                raise errors.ConfigError(f"invalid claude profile subdir '{p.subdir}': {reason}")
            if not os.path.isdir(p.path):
                raise errors.ConfigError(f"claude profile directory '{p.path}' does not exist; create it or drop it")
        bwrap.check_size("home_size_bytes", home_size_bytes)
        bwrap.check_size("tmp_size_bytes", tmp_size_bytes)
        for label, doc in [("managed_settings", managed_settings), *(managed_settings_presets or {}).items()]:
            try:
                json.dumps(doc)
            except (TypeError, ValueError) as exc:
                raise errors.ConfigError(f"managed settings '{label}' is not JSON: {exc}") from None
        environment.sandbox_env(env)  # refuse credential variables now, not at the first step
        sandbox_limits.check_limits(limits)
        if isinstance(output_keep_bytes, bool) or not isinstance(output_keep_bytes, int) or output_keep_bytes < 0:
            raise errors.ConfigError(f"output_keep_bytes must be a whole number of bytes, got {output_keep_bytes!r}")
        self.output_keep_bytes = output_keep_bytes
        identity.check_host_uid(sandbox_host_uid)
        # A root worker's bubblewrap sandbox runs as a non-root host uid; gVisor's kernel judges files itself.
        self._host_uid = sandbox_host_uid if os.geteuid() == 0 and isolation == "bwrap" else None
        # Who must own what the sandbox writes: on a root worker, the uid the step writes as (gVisor's
        # gofer writes the host as the step's own uid); None on a non-root worker.
        self._writable_uid = (
            self._host_uid if isolation == "bwrap" else layout.SANDBOX_UID if os.geteuid() == 0 else None
        )
        self.isolation: environment.Isolation = isolation
        self.timeout = float(timeout)
        self.credential = credential
        self.managed_settings = None if managed_settings is None else dict(managed_settings)
        self.managed_settings_presets = {k: dict(v) for k, v in (managed_settings_presets or {}).items()}
        self.profiles = tuple(profiles)
        self.env = dict(env or {})
        self.home_size_bytes = home_size_bytes
        self.tmp_size_bytes = tmp_size_bytes
        self.claude_path = claude_path
        self.allow_bypass = allow_bypass
        if temp_dir is not None and not os.path.isdir(temp_dir):
            raise errors.ConfigError(f"temp_dir '{temp_dir}' is not a directory; create it or leave temp_dir unset")
        self.temp_dir = temp_dir
        where = "ironflow.local.LocalSandboxProvider"
        kept = renamed_argument(where, "sessions_dir", sessions_dir, "conversations_dir", conversations_dir)
        if kept is not None:
            identity.check_conversations_dir(kept, bubblewrap=isolation == "bwrap", host_uid=self._host_uid)
        self.conversations_dir = kept
        self.limits = limits
        self.git_hosts = git_hosts or git_sync.GitHosts()
        #: Workspaces kept for a retry of their step (``keep_on_retry``).
        self.kept = kept_workspaces.KeptWorkspaces(temp_dir)
        #: The running sandboxes (their cgroups, limits and run ids); sessions start theirs here too.
        bounded = launch.within_file_table(limits, host_processes=isolation == "bwrap")
        self.processes = launch.SandboxProcesses(
            cgroups.probe(), bounded, host_uid=self._host_uid, gvisor=isolation == "gvisor"
        )
        workdirs.sweep(temp_dir)  # the temp dirs of workers that were killed before they could clean up
        log.info("local sandbox limits: %s", self.limits_report())

    def limits_report(self) -> str:
        """Which per-sandbox limits hold on this machine, and by what mechanism (one line)."""
        return self.processes.support.describe()

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
    ) -> CommandResult:
        """Run ``argv`` in a fresh sandbox; a non-zero exit is a result, not an error.

        No network at all, or with ``auth_proxy`` only the in-process proxy (the
        provider's credential, an opaque token in ``ANTHROPIC_AUTH_TOKEN``), as an
        agent step has. ``run_id`` lets :meth:`release_run` kill it. A ``workspace`` is its
        working directory at ``/workspace``; the result holds what it changed there.
        ``on_output`` hears each piece of output as it comes (``ironflow exec`` streams so).

        Raises:
            CommandTimeout: it ran past ``timeout_s`` (its process tree is gone by then); the
                error holds what it wrote until then (``output``, ``stderr``: bytes, bounded).
            SandboxError: the sandbox runtime could not start it.
            StepConfigError: ``env`` names a credential variable.
            ConfigError: a mount this runtime cannot show (gVisor: none under a path its setup hides).
            WorkspaceRefused, WorkspaceUnsafe, WorkspaceConflict: see :mod:`ironflow.local.workspaces.copies`.
        """
        if not argv:
            raise errors.ConfigError("run_command needs a command")
        limit = self.timeout if timeout_s is None else timeout_s
        variables = {**self.env, **(env or {})}
        run_env = environment.sandbox_env(variables)  # refuses credential variables before anything starts
        mounts = tuple(read_only_mounts)
        for mount in mounts:
            problem = sandbox_argv.mount_problem(self.isolation, mount)
            if problem is not None:
                raise errors.ConfigError(problem)
        writable = tuple(writable_mounts)
        local_workspaces.check_mounts(self.isolation, self._writable_uid, writable, mounts, workspace)
        async with contextlib.AsyncExitStack() as stack:
            # A temp dir only when something goes in it (the proxy socket, managed settings, gVisor's
            # bundle, a workspace's copy).
            tmp: str | None = None
            needs_dir = auth_proxy or workspace is not None or self.managed_settings is not None
            if needs_dir or self.isolation == "gvisor":
                tmp = stack.enter_context(workdirs.run_dir(self.temp_dir))
            prepared: local_workspaces.PreparedWorkspace | None = None
            if workspace is not None and tmp is not None:
                prepared = await self._open_workspace(workspace, tmp)
                writable = (bwrap.WritableMount(prepared.copy, WORKSPACE_PATH), *writable)
                working_dir = working_dir or WORKSPACE_PATH
            socket_path: str | None = None
            token: Secret | None = None
            if auth_proxy and tmp is not None:
                socket_path = os.path.join(tmp, "proxy.sock")
                token = await stack.enter_async_context(
                    step_proxy.proxy_session(
                        self._credential(None),
                        socket_path=socket_path,
                        run_id=run_id,
                        step="command",
                        expires_in=limit + 60,
                        max_connections=self.limits.proxy_connections,
                    )
                )
            if token is not None:
                run_env.update(environment.proxy_env(token.reveal()))
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
                stop_when=bound.stop_when(prepared),
            )
            if finished.stopped is not None:
                raise errors.WorkspaceUnsafe(finished.stopped)
            if finished.timed_out:
                raise errors.CommandTimeout(limit, output=finished.stdout, stderr=finished.stderr)
            out, err = _text(finished.stdout), _text(finished.stderr)
            code = sandbox_argv.command_exit_code(finished.code, err)
            sandbox_argv.raise_if_sandbox_failed(code, err, self.isolation)
            message = workspaces.push_message("exec", " ".join(argv))
            changes = None if prepared is None else await self._close_workspace(prepared, code == 0, message)
        return CommandResult(code, out, err, time.monotonic() - start, changes, *finished.sizes)

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
        command.validate_prompt_size(config)
        args = command.build_args(config, allow_bypass=self.bypass_allowed())
        ignored = environment.ignored_settings(config, isolation=self.isolation, presets=self.managed_settings_presets)
        managed = environment.managed_settings_for(config, self.managed_settings, self.managed_settings_presets)
        if ignored:
            log.warning("local sandbox ignores settings that only apply on Kubernetes: %s", "; ".join(ignored))
        mounts = self._step_mounts(config)
        local_workspaces.check_mounts(self.isolation, self._writable_uid, (), mounts, config.workspace)
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
        async with contextlib.AsyncExitStack() as stack:
            tmp = stack.enter_context(workdirs.run_dir(self.temp_dir))
            prepared = await stack.enter_async_context(self.kept.attempt(config, tmp, self._open_workspace))
            writable = () if prepared is None else (bwrap.WritableMount(prepared.copy, WORKSPACE_PATH),)
            socket_path = os.path.join(tmp, "proxy.sock")
            async with step_proxy.proxy_session(
                credential,
                socket_path=socket_path,
                run_id=run_id,
                step=step,
                expires_in=self.timeout + 60,
                trace_context=config.trace_context,
                max_connections=self.limits.proxy_connections,
            ) as token:
                token_id = hashlib.sha256(token.reveal().encode()).hexdigest()[:12]
                log.info("local sandbox step started: isolation=%s token=%s", self.isolation, token_id)
                env = environment.sandbox_env(self.env, proxy_token=token.reveal())
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
                    )
                    start = time.monotonic()
                    finished = await self.processes.run(
                        full,
                        stdin=stdin,
                        limit_s=self.timeout,
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
                log.info("local sandbox step timed out: token=%s", token_id)
                raise errors.AgentTimeout(self.timeout)
            code, out, err = finished.code, _text(finished.stdout), _text(finished.stderr)
            log.info("local sandbox step finished: exit_code=%d token=%s", code, token_id)
            rate_limits.record_rate_limits(config, out)
            sandbox_argv.raise_if_sandbox_failed(code, err, self.isolation)
            if code == 0:
                result = output.parse_output(out, config, wall_ms=wall_ms)
            else:
                result = output.handle_nonzero_exit(code, out, err, config, wall_ms=wall_ms)
            message = workspaces.push_message(step, config.prompt)
            changes = None if prepared is None else await self._close_workspace(prepared, True, message)
        account_id = config.account.account_id if config.account is not None else result.account_id
        return dataclasses.replace(result, ignored_settings=ignored, account_id=account_id, workspace=changes)

    async def _open_workspace(self, spec: Workspace, tmp: str) -> local_workspaces.PreparedWorkspace:
        # A host directory's copy, or a git source's clone (made in a sandbox of its own).
        if spec.is_pvc:
            raise errors.WorkspaceRefused(
                f"workspace '{spec.source}' is a Kubernetes PersistentVolumeClaim: run the step on the k8s backend"
            )
        if spec.is_git:
            return await git_sync.clone(
                spec, tmp, processes=self.processes, shape=self.shape(), hosts=self.git_hosts, limit_s=self.timeout
            )
        return await asyncio.to_thread(local_workspaces.prepare, spec, tmp, sandbox_uid=self._writable_uid)

    async def _close_workspace(
        self, prepared: local_workspaces.PreparedWorkspace, succeeded: bool, message: str
    ) -> WorkspaceChanges:
        """What the step changed; applied to the host directory, or pushed, when it succeeded and asked."""
        changes = await writeback.finish(prepared, succeeded=succeeded)
        if succeeded and prepared.spec.push_branch is not None:
            changes = await git_sync.push(
                prepared, changes, processes=self.processes, shape=self.shape(), hosts=self.git_hosts,
                limit_s=self.timeout, message=message,
            )  # fmt: skip
        return changes

    def sessions(self, *, state_dir: str | None = None) -> local_sessions.LocalSessions:
        """This provider's sandbox sessions, in its sandbox (``state_dir``: where their sockets go)."""
        return local_sessions.LocalSessions(self, state_dir=state_dir)

    def shape(self) -> sandbox_argv.SandboxShape:
        """What every sandbox of this provider is made of (its sessions' too)."""
        return sandbox_argv.SandboxShape(
            self.isolation, self.profiles, self.home_size_bytes, self.tmp_size_bytes, self.conversations_dir,
            self._host_uid, self._writable_uid, self.limits,
        )  # fmt: skip

    def claude_cli(self) -> str:
        """The Claude Code CLI's real file: inside the sandbox only its package directory is shown."""
        return os.path.realpath(self.claude_path or cli.find_claude_cli())

    def bypass_allowed(self) -> bool:
        """Whether a step may skip permission prompts: the provider's word, else the worker's environment."""
        return self.allow_bypass if self.allow_bypass is not None else os.environ.get(layout.ALLOW_BYPASS_ENV) == "1"

    def proxy_credential(self) -> environment.ProxyCredential:
        """The credential the in-process proxy holds for a sandbox session's agent steps."""
        return self._credential(None)

    def _credential(self, config: AgentConfig | None) -> environment.ProxyCredential:
        base = self.credential
        upstream = base.upstream if base is not None else "https://api.anthropic.com"
        if config is not None and config.account is not None:
            kind: Literal["api_key", "oauth_token"] = (
                "api_key" if config.account.credential_kind == "api_key" else "oauth_token"
            )
            return environment.ProxyCredential(config.account.value, kind, upstream)
        if base is not None:
            return base
        if os.environ.get("CLAUDE_CODE_OAUTH_TOKEN"):
            return environment.ProxyCredential(Secret(os.environ["CLAUDE_CODE_OAUTH_TOKEN"]), "oauth_token", upstream)
        if os.environ.get("ANTHROPIC_API_KEY"):
            return environment.ProxyCredential(Secret(os.environ["ANTHROPIC_API_KEY"]), "api_key", upstream)
        raise errors.MissingCredential(
            "no credential: attach a Provider Account or set CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_API_KEY"
        )

    def _step_mounts(self, config: AgentConfig) -> tuple[bwrap.ReadOnlyMount, ...]:
        mounts: list[bwrap.ReadOnlyMount] = []
        for vol in config.pod.read_only_volumes:
            if not isinstance(vol.source, HostPathSource):
                continue
            if vol.sub_path is not None and (reason := validate_sub_path(vol.sub_path)) is not None:
                raise errors.StepConfigError(f"read-only volume: {reason}")
            source = vol.source.path if vol.sub_path is None else os.path.join(vol.source.path, vol.sub_path)
            if not os.path.isdir(source):
                raise errors.StepConfigError(
                    f"read-only host path '{source}' is not a directory on this machine; "
                    "create it or drop read_only_host_path from the step"
                )
            mount = bwrap.ReadOnlyMount(source, vol.mount_path)
            problem = sandbox_argv.mount_problem(self.isolation, mount)
            if problem is not None:
                raise errors.StepConfigError(problem)
            mounts.append(mount)
        return tuple(mounts)
