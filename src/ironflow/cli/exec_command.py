"""``ironflow exec``: one command in a single-use sandbox, locally or in a Kubernetes pod.

Locally over :meth:`~ironflow.local.sandbox_provider.LocalSandboxProvider.run_command`; with
``--backend k8s``, a ``PodRun`` shaped by the provider file (see
:func:`ironflow.k8s.commands.pod_runs.exec_pod_run`), piped stdin written over ``pods/exec``;
it does not run on agent-sandbox. It passes
the command's exit code through (on k8s, whose pod reports only its phase, a failed command is 1)
and reports a timed-out command as a failed step (1). No network unless ``--allow-host``,
``--egress-profile``, ``--egress`` or the provider file's ``egress:`` open the egress proxy, reached
with an egress-only token (no Claude credential needed; on k8s the provider's auth proxy issues it
and revokes it when the pod is gone). A local ``exec`` loads no Kubernetes client,
agent-sandbox, model server or HTTP stack until its sandbox starts.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO

import typer

from ironflow import errors
from ironflow.cli import backends, exits, inputs, verbosity
from ironflow.cli import egress_options as egress_cli
from ironflow.cli import workspace as ws
from ironflow.cli.backends import Backend, Isolation
from ironflow.cli.formats import ResultFormat, TerminalStream, document, for_terminal
from ironflow.egress import EgressPolicy
from ironflow.local.sandbox_provider import DEFAULT_TIMEOUT_S, LocalSandboxProvider
from ironflow.results import CommandResult
from ironflow.workspaces import Workspace, WorkspaceChanges

if TYPE_CHECKING:
    from ironflow.k8s.commands.execution import PodRunOutput
    from ironflow.k8s.commands.pod_runs import PodRun
    from ironflow.k8s.settings import ProviderSettings

__all__ = ["register"]


async def _run_pod(
    run: PodRun, settings: ProviderSettings, spec: Workspace | None, policy: EgressPolicy | None
) -> tuple[PodRunOutput, WorkspaceChanges | None]:
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
    from ironflow.cli import agent  # its spinner; the agent command's modules only on this path
    from ironflow.k8s.commands import egress_runs, pod_runs
    from ironflow.k8s.workspaces import command_pods

    provider = backends.k8s_provider(provider_file)
    if provider.settings.relays:  # refused, never silently dropped
        exits.fail("relays: in the provider file reach agent steps on --backend k8s; exec pods do not get them yet")
    own = egress_cli.LocalFile(egress=provider.settings.egress, profiles=provider.settings.egress_profiles)
    policy = egress_cli.command_policy(*egress, own)
    hosts = ws.git_hosts(spec)
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
    ws.write_patch(changes, patch)
    shown = sys.stderr if patch == "-" else sys.stdout  # a patch on stdout is all that is there
    if output is not ResultFormat.TEXT:
        out = {"exit_code": result.exit_code or (0 if result.success else 1), "stdout": result.logs, "stderr": ""}
        print(document({**out, **(changes.to_json() if changes is not None else {})}, output), file=shown)
    else:
        shown.write(for_terminal(result.logs, shown))
    if result.success:
        raise typer.Exit(0)
    if result.exit_code:  # exit like the command did, as the local backend does
        print(f"error: the command exited with {result.exit_code} in pod {run.name}", file=sys.stderr)
        raise typer.Exit(result.exit_code)
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


def exec_command(
    ctx: typer.Context,
    backend: Annotated[Backend, typer.Option(help="Where the command runs: local or k8s.")] = Backend.LOCAL,
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bwrap, gvisor (runsc) or docker.")] = (
        Isolation.BWRAP
    ),
    timeout: Annotated[float, typer.Option(min=0.001, help="Seconds before the command is killed.")] = (
        DEFAULT_TIMEOUT_S
    ),
    provider_file: Annotated[
        Path | None,
        typer.Option(
            "--provider",
            help="--backend k8s: provider YAML (image, namespace, cluster, hardening); local: a file of relays: "
            "(hosts reached with a credential the proxy injects), egress: and egress_profiles:.",
        ),
    ] = None,
    workspace: ws.WorkspaceOption = None,
    patch: ws.PatchOption = None,
    apply: ws.ApplyOption = False,
    push: ws.PushOption = None,
    mount: ws.MountOption = None,
    output: Annotated[
        ResultFormat,
        typer.Option("--output", "-o", help="text: the command's own output; json or yaml: it, and the patch."),
    ] = ResultFormat.TEXT,
    stdin: Annotated[
        bool | None,
        typer.Option(
            "--stdin/--no-stdin",
            help="Forward standard input to the command (default: when it is piped, not a terminal).",
            show_default=False,
        ),
    ] = None,
    allow_host: egress_cli.AllowHostOption = None,
    egress_profile: egress_cli.EgressProfileOption = None,
    egress_file: egress_cli.EgressFileOption = None,
) -> None:
    """Run -- CMD ARGS… in a single-use sandbox (no network unless --allow-host); exit with its exit code.

    Piped standard input reaches the command (``echo x | ironflow exec -- cat``)."""
    inputs.seconds(timeout, "--timeout")
    argv = list(ctx.args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        exits.fail("missing command: ironflow exec [OPTIONS] -- CMD [ARGS...]")
    if backend is Backend.AGENT_SANDBOX:
        exits.fail(
            "exec runs on --backend local or k8s; agent-sandbox runs agent steps only "
            "(ironflow agent --backend agent-sandbox)"
        )
    spec = ws.workspace(workspace, patch=patch, apply=apply, push=push, pods=backend is Backend.K8S)
    read_only, writable = ws.mounts(mount)
    if backend is Backend.K8S and mount:
        exits.fail("--mount runs on --backend local; on k8s mount a PVC in the provider file")
    given = ws.read_stdin(stdin)
    if backend is Backend.K8S:
        egress = (allow_host, egress_profile, egress_file)
        _exec_k8s(argv, provider_file, timeout, _pod_workspace(spec), patch, output, given, egress)
    # Text output streams as the command writes it; -o json holds it for the one document at the end.
    streamed = _Stream(sys.stderr if patch == "-" else sys.stdout) if output is ResultFormat.TEXT else None
    found = egress_cli.local_file(provider_file)
    policy = egress_cli.command_policy(allow_host, egress_profile, egress_file, found)
    relays = found.relays
    try:
        provider = LocalSandboxProvider(
            isolation=isolation.value,
            timeout=timeout,
            git_hosts=ws.git_hosts(spec),
            relays=relays,
            relay_upstream=backends.relay_upstream() if relays else None,
            egress=policy,
        )
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
    ws.write_patch(result.workspace, patch)
    if output is not ResultFormat.TEXT:
        print(document(_exec_json(result), output), file=sys.stderr if patch == "-" else sys.stdout)
    if result.killed:  # the kernel's SIGKILL says nothing itself: exit 137 alone
        print(f"error: the command was {result.killed}", file=sys.stderr)
    raise typer.Exit(result.exit_code)


class _Stream:
    """The command's output, written through to ``stdout_to`` and stderr as each piece arrives:
    its bytes as they are to a pipe or a file, control characters shown as escapes to a terminal."""

    def __init__(self, stdout_to: TextIO) -> None:
        self.targets = {"stdout": TerminalStream(stdout_to), "stderr": TerminalStream(sys.stderr)}

    def __call__(self, stream: str, data: bytes) -> None:
        self.targets[stream].write(data)


def register(app: typer.Typer) -> None:
    """Add ``exec`` to the ``ironflow`` app."""
    app.command(
        "exec",
        # Options end at the command's first word (``exec ls -l`` runs ``ls -l``), and a misspelt
        # option before it is an error, not the command to run.
        context_settings={"allow_extra_args": True, "allow_interspersed_args": False},
    )(exec_command)
