"""What ``ironflow exec`` does once its options are read: one command in a single-use sandbox,
locally or in a Kubernetes pod, its exit code passed through.

Locally over :meth:`~ironflow.local.sandbox_provider.LocalSandboxProvider.run_command`; with
``--backend k8s``, a ``PodRun`` shaped by the provider file (see
:func:`ironflow.k8s.commands.pod_runs.exec_pod_run`), piped stdin written over ``pods/exec``. The
Typer command (:mod:`ironflow.cli.exec_command`) and its common call read without Typer
(:mod:`ironflow.cli.quick`) both land here. What an option needs loads only when it is given: a
plain ``exec -- CMD`` loads the local sandbox and nothing of workspaces, egress, relays or a cluster.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, NoReturn, TextIO

from ironflow import errors
from ironflow.cli import exits, inputs, verbosity
from ironflow.cli.formats import ResultFormat, TerminalStream, document, for_terminal
from ironflow.cli.inputs import Backend, Isolation
from ironflow.command_result import CommandResult
from ironflow.local.sandbox.bwrap import ReadOnlyMount, WritableMount
from ironflow.local.sandbox_provider import DEFAULT_TIMEOUT_S, LocalSandboxProvider

if TYPE_CHECKING:
    from ironflow.auth_proxy import relays as relay_specs
    from ironflow.egress import EgressPolicy
    from ironflow.k8s.commands.execution import PodRunOutput
    from ironflow.k8s.commands.pod_runs import PodRun
    from ironflow.k8s.settings import ProviderSettings
    from ironflow.workspaces import Workspace, WorkspaceChanges

__all__ = ["MAX_STDIN_BYTES", "mounts", "read_stdin", "run"]

#: The most of its standard input ``exec`` forwards (it is read before the sandbox starts).
MAX_STDIN_BYTES: Final = 64 * 1024 * 1024


def _ws() -> ModuleType:
    """The workspace options' module (the local workspaces' code): only when one is given."""
    from ironflow.cli import workspace

    return workspace


def _workspace(text: str | None, *, patch: str | None, apply: bool, push: str | None, pods: bool) -> Workspace | None:
    if text is None and patch is None and not apply and push is None:
        return None
    spec: Workspace | None = _ws().workspace(text, patch=patch, apply=apply, push=push, pods=pods)
    return spec


def _local_egress(
    provider_file: Path | None,
    allow_host: list[str] | None,
    egress_profile: list[str] | None,
    egress_file: list[Path] | None,
) -> tuple[tuple[relay_specs.RelaySpec, ...], EgressPolicy | None]:
    """A local provider file's relays, and the egress policy of it and the options; none of
    their modules load when neither is given."""
    if provider_file is None and not (allow_host or egress_profile or egress_file):
        return (), None
    from ironflow.cli import egress_options as egress_cli

    found = egress_cli.local_file(provider_file)
    return found.relays, egress_cli.command_policy(allow_host, egress_profile, egress_file, found)


def _relay_upstream() -> Any:
    from ironflow.cli import backends

    return backends.relay_upstream()


def mounts(values: list[str] | None) -> tuple[tuple[ReadOnlyMount, ...], tuple[WritableMount, ...]]:
    """``--mount SRC:DST[:ro|rw]`` values split into read-only and writable mounts; exits 2 on a bad one."""
    read_only: list[ReadOnlyMount] = []
    writable: list[WritableMount] = []
    for value in values or ():
        parts = value.split(":")
        mode = "ro"
        if len(parts) == 3:
            mode = parts.pop()
        if len(parts) != 2 or not parts[0] or not parts[1] or mode not in ("ro", "rw"):
            exits.fail(f"--mount '{value}' must be SRC:DST, SRC:DST:ro or SRC:DST:rw")
        source, target = os.path.abspath(parts[0]), parts[1]
        if not os.path.isdir(source):
            exits.fail(f"--mount source '{parts[0]}' is not a directory")
        if not target.startswith("/"):
            exits.fail(f"--mount destination '{target}' must be an absolute path in the sandbox")
        if mode == "rw":
            writable.append(WritableMount(source, target))
        else:
            read_only.append(ReadOnlyMount(source, target))
    return tuple(read_only), tuple(writable)


def read_stdin(forward: bool | None = None) -> bytes | None:
    """What is piped into the command: all of it, up to :data:`MAX_STDIN_BYTES` (more exits 2:
    it would sit in memory). ``forward`` None (the default) forwards a pipe or a file, never a
    terminal; ``--no-stdin`` (False) nothing, for a loop that reads its own input; ``--stdin``
    (True) a terminal's too, until end of input."""
    stream = sys.stdin
    if forward is False or stream is None or (forward is None and stream.isatty()):
        return None
    data = stream.buffer.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        exits.fail(f"standard input is over {MAX_STDIN_BYTES} bytes; pass a file with --mount instead")
    return data


async def _run_pod(
    run: PodRun, settings: ProviderSettings, spec: Workspace | None, policy: EgressPolicy | None
) -> tuple[PodRunOutput, WorkspaceChanges | None]:
    from ironflow.cli import backends
    from ironflow.k8s.commands import egress_runs
    from ironflow.k8s.workspaces import command_pods

    now = int(time.time())
    async with (
        await backends.connect(settings.cluster) as client,
        egress_runs.with_egress(run, settings, policy, now=now) as proxied,
    ):
        if spec is None:
            return await proxied.run(client), None
        return await command_pods.run_in_workspace(client, settings, proxied, spec, now=now)


def _exec_k8s(
    argv: list[str], provider_file: Path | None, timeout: float, spec: Workspace | None, patch: str | None,
    output: ResultFormat, stdin: bytes | None, egress: tuple[list[str] | None, list[str] | None, list[Path] | None],
) -> NoReturn:  # fmt: skip
    """Run ``argv`` once in a hardened pod placed as the provider file says (on a clone of a
    git workspace, if given; through the auth proxy's egress listener when the file's ``egress:``
    and ``egress`` options open something); exit like local. Piped ``stdin`` goes over
    ``pods/exec`` once the pod runs; none or empty is the same to the command."""
    import asyncio
    import secrets  # the pod name's random part

    from ironflow.cli import (
        agent,  # its spinner; the agent command's modules only on this path
        backends,
    )
    from ironflow.cli import egress_options as egress_cli
    from ironflow.k8s.commands import egress_runs, pod_runs
    from ironflow.k8s.workspaces import command_pods

    provider = backends.k8s_provider(provider_file)
    if provider.settings.relays:  # refused, never silently dropped
        exits.fail("relays: in the provider file reach agent steps on --backend k8s; exec pods do not get them yet")
    own = egress_cli.LocalFile(egress=provider.settings.egress, profiles=provider.settings.egress_profiles)
    policy = egress_cli.command_policy(*egress, own)
    hosts = _ws().git_hosts(spec)
    settings = provider.settings if hosts is None else backends.with_git_hosts(provider, hosts).settings
    try:
        egress_runs.check(settings, policy)
        if spec is not None:
            command_pods.check(settings, spec)
        run = pod_runs.exec_pod_run(
            settings, argv, timeout_s=timeout, now_ms=time.time_ns() // 1_000_000, rand32=secrets.randbits(32)
        )
        if stdin:
            run = run.stdin(stdin)
        with agent.progress(
            f"running the command in pod {run.name} ({run.settings.namespace})", quiet=verbosity.quiet()
        ):
            result, changes = asyncio.run(_run_pod(run, settings, spec, policy))
    except errors.OperationTimeout as exc:  # as the local backend: a timeout is a failed step, not the cluster's
        exits.fail(f"timed out: {exc.message}", exits.EXIT_STEP_FAILED)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    _ws().write_patch(changes, patch)
    shown = sys.stderr if patch == "-" else sys.stdout  # a patch on stdout is all that is there
    if output is not ResultFormat.TEXT:
        out = {"exit_code": result.exit_code or (0 if result.success else 1), "stdout": result.logs, "stderr": ""}
        print(document({**out, **(changes.to_json() if changes is not None else {})}, output), file=shown)
    else:
        shown.write(for_terminal(result.logs, shown))
    if result.success:
        raise SystemExit(0)
    if result.exit_code:  # exit like the command did, as the local backend does
        print(f"error: the command exited with {result.exit_code} in pod {run.name}", file=sys.stderr)
        raise SystemExit(result.exit_code)
    exits.fail(f"the command failed in pod {run.name} (phase {result.phase})", exits.EXIT_STEP_FAILED)


def _pod_workspace(spec: Workspace | None) -> Workspace | None:
    """A pod's workspace: a git URL (exits 2 otherwise, one line)."""
    if spec is not None and not spec.is_git and not spec.is_pvc:
        exits.fail("--workspace DIR runs on --backend local: a pod cannot see this machine; give a git URL or pvc:NAME")
    return spec


def _exec_json(result: CommandResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "duration_s": round(result.duration, 3),
        # how much it wrote, and how much of that the output above leaves out (a marker line stands there)
        "stdout_bytes": result.stdout_bytes,
        "stderr_bytes": result.stderr_bytes,
        "stdout_cut": result.stdout_cut,
        "stderr_cut": result.stderr_cut,
        "killed": result.killed,  # why the sandbox killed it (its memory limit), null when nothing was
    }
    if result.workspace is not None:
        out.update(result.workspace.to_json())
    return out


class _Stream:
    """The command's output, written through to ``stdout_to`` and stderr as each piece arrives:
    its bytes as they are to a pipe or a file, control characters shown as escapes to a terminal."""

    def __init__(self, stdout_to: TextIO) -> None:
        self.targets = {"stdout": TerminalStream(stdout_to), "stderr": TerminalStream(sys.stderr)}

    def __call__(self, stream: str, data: bytes) -> None:
        self.targets[stream].write(data)


def run(
    args: list[str],
    *,
    backend: Backend = Backend.LOCAL,
    isolation: Isolation = Isolation.BWRAP,
    timeout: float = DEFAULT_TIMEOUT_S,
    provider_file: Path | None = None,
    workspace: str | None = None,
    patch: str | None = None,
    apply: bool = False,
    push: str | None = None,
    mount: list[str] | None = None,
    output: ResultFormat = ResultFormat.TEXT,
    stdin: bool | None = None,
    allow_host: list[str] | None = None,
    egress_profile: list[str] | None = None,
    egress_file: list[Path] | None = None,
) -> NoReturn:
    """Run ``args`` (after a leading ``--``) once in a single-use sandbox and exit as it did; the
    options' values are ``ironflow exec``'s (:mod:`ironflow.cli.exec_command`)."""
    inputs.seconds(timeout, "--timeout")
    argv = args[1:] if args[:1] == ["--"] else args
    if not argv:
        exits.fail("missing command: ironflow exec [OPTIONS] -- CMD [ARGS...]")
    if backend is Backend.AGENT_SANDBOX:
        exits.fail(
            "exec runs on --backend local or k8s; agent-sandbox runs agent steps only "
            "(ironflow agent --backend agent-sandbox)"
        )
    spec = _workspace(workspace, patch=patch, apply=apply, push=push, pods=backend is Backend.K8S)
    read_only, writable = mounts(mount)
    if backend is Backend.K8S and mount:
        exits.fail("--mount runs on --backend local; on k8s mount a PVC in the provider file")
    given = read_stdin(stdin)
    if backend is Backend.K8S:
        egress = (allow_host, egress_profile, egress_file)
        _exec_k8s(argv, provider_file, timeout, _pod_workspace(spec), patch, output, given, egress)
    # Text output streams as the command writes it; -o json holds it for the one document at the end.
    streamed = _Stream(sys.stderr if patch == "-" else sys.stdout) if output is ResultFormat.TEXT else None
    relays, policy = _local_egress(provider_file, allow_host, egress_profile, egress_file)
    try:
        provider = LocalSandboxProvider(
            isolation=isolation.value,
            timeout=timeout,
            git_hosts=None if spec is None else _ws().git_hosts(spec),
            relays=relays,
            relay_upstream=_relay_upstream() if relays else None,
            egress=policy,
        )
        if provider.runs_blocking(spec):  # a plain command: no event loop, nor asyncio's import
            result = provider.run_command_blocking(
                argv, stdin=given, read_only_mounts=read_only, writable_mounts=writable, on_output=streamed
            )
        else:
            import asyncio

            result = asyncio.run(
                provider.run_command(
                    argv,
                    stdin=given,
                    workspace=spec,
                    read_only_mounts=read_only,
                    writable_mounts=writable,
                    on_output=streamed,
                )
            )
    except errors.CommandTimeout as exc:  # what it wrote until then, then why it stopped
        if streamed is None:
            TerminalStream(sys.stdout).write(exc.output, final=True)
            TerminalStream(sys.stderr).write(exc.stderr, final=True)
        exits.fail_for(exc)
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    if patch is not None:
        _ws().write_patch(result.workspace, patch)
    if output is not ResultFormat.TEXT:
        print(document(_exec_json(result), output), file=sys.stderr if patch == "-" else sys.stdout)
    if result.killed:  # the kernel's SIGKILL says nothing itself: exit 137 alone
        print(f"error: the command was {result.killed}", file=sys.stderr)
    raise SystemExit(result.exit_code)
