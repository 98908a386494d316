"""``ironflow agent`` and ``ironflow exec``: one agent step or one command in a sandbox.

Thin over :class:`~ironflow.local.sandbox_provider.LocalSandboxProvider` (and, with
``--backend k8s``, the Kubernetes provider; with ``--backend agent-sandbox``,
:class:`~ironflow.agent_sandbox.claim_provider.AgentSandboxProvider`: a claimed sandbox, warm
from the file's pool when one is ready). ``exec`` runs locally or, with ``--backend k8s``,
a ``PodRun`` shaped by the provider file (see :func:`ironflow.k8s.commands.pod_runs.exec_pod_run`); it does
not run on agent-sandbox. The answer goes to stdout; progress to stderr (rich, only on a
terminal). Exit codes are :mod:`ironflow.cli.exits`'s; ``exec`` passes the command's own
through (on k8s, whose pod reports only its phase, a failed command is 1) and reports a
timed-out command as a failed step (1), as the local backend does. The local backend (both
commands' default) is imported here; the others where they run, so a local ``exec`` loads no
Kubernetes client, agent-sandbox or model server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO

import typer

from ironflow import errors
from ironflow.claude import turns
from ironflow.cli import backends, exits, inputs, untrusted, verbosity
from ironflow.cli import workspace as ws
from ironflow.cli.backends import Backend, Isolation
from ironflow.cli.formats import ResultFormat, TerminalStream, document, for_terminal, printable
from ironflow.fake_model.script import Script
from ironflow.local.sandbox_provider import DEFAULT_TIMEOUT_S, LocalSandboxProvider
from ironflow.provider import AgentProvider, LogSink
from ironflow.results import AgentResult, CommandResult
from ironflow.secrets import redact
from ironflow.steps import AgentConfig
from ironflow.workspaces import Workspace, WorkspaceChanges

if TYPE_CHECKING:
    from ironflow.auth_proxy.git_hosts import GitHosts
    from ironflow.auth_proxy.relays import RelaySpec
    from ironflow.k8s.commands.execution import PodRunOutput
    from ironflow.k8s.commands.pod_runs import PodRun
    from ironflow.k8s.settings import ProviderSettings

__all__ = ["register"]

_NO_CONVERSATIONS = (
    "--continue and --resume need Claude Code's conversations kept between steps: run with --backend k8s or "
    "agent-sandbox and a provider file setting sandbox.sessions_claim (a PVC at ~/.claude/projects); a local "
    "step's HOME goes with its sandbox"
)


class _Progress(logging.Handler):
    """Puts the newest ``ironflow.progress`` line (where the step's pod is) on the spinner."""

    def __init__(self, status: Any, message: str) -> None:
        super().__init__(logging.INFO)
        self.status, self.message = status, message

    def emit(self, record: logging.LogRecord) -> None:
        self.status.update(f"{self.message}: {record.getMessage()}")


@contextlib.contextmanager
def _progress(message: str, *, quiet: bool = False) -> Iterator[None]:
    """A spinner on stderr when it is a terminal, following the step's progress (queued, on
    node X, pulling the image, running pod NAME); nothing otherwise (scripts, CI, ``-v``,
    whose turns take stderr)."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    progress = logging.getLogger("ironflow.progress")
    with Console(stderr=True).status(message) as status:
        handler = _Progress(status, message)
        level = progress.level
        progress.addHandler(handler)
        progress.setLevel(logging.INFO)
        try:
            yield
        finally:
            progress.removeHandler(handler)
            progress.setLevel(level)


def _require_credential_env() -> None:
    # The provider reads these itself, at invocation; this only turns "none" into bad input.
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("CLAUDE_CODE_OAUTH_TOKEN")):
        exits.fail(
            "no credential: set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN (it stays outside the sandbox), "
            "or use --fake-model for the offline model server"
        )


def _prompt(prompt: str | None) -> str:
    """The PROMPT argument (``-``: all of stdin), or exit 2: missing, empty, or not UTF-8."""
    if prompt is None:
        exits.fail("missing PROMPT: ironflow agent [OPTIONS] PROMPT (or - to read it from stdin)")
    if prompt == "-":
        try:
            prompt = sys.stdin.read()
        except UnicodeDecodeError:
            exits.fail("the prompt on stdin is not valid UTF-8 text; pass the prompt as UTF-8")
        if not prompt.strip():
            exits.fail("PROMPT - read an empty prompt from stdin; pipe one in: echo hi | ironflow agent -")
    try:
        prompt.encode()
    except UnicodeEncodeError:
        exits.fail("PROMPT is not valid UTF-8 text; pass the prompt as UTF-8")
    return prompt


def _tools(values: list[str] | None) -> tuple[str, ...]:
    """``--allowed-tools`` values, each comma-separated outside parentheses (``Bash(a,b)`` is one)."""
    out: list[str] = []
    for value in values or ():
        depth, start = 0, 0
        for i, char in enumerate(value + ","):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == "," and depth == 0:
                name = value[start:i].strip()
                if name:
                    out.append(name)
                start = i + 1
        if depth != 0:
            exits.fail(f"--allowed-tools '{value}' has unbalanced parentheses")
    return tuple(out)


def _result_json(result: AgentResult) -> dict[str, Any]:
    return {
        "value": result.value,
        "model": result.model,
        "session_id": result.session_id,
        "duration_ms": result.duration_ms,
        "cost_usd": result.cost_usd,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "environment_id": result.environment_id,
        "ignored_settings": list(result.ignored_settings),
        **(result.workspace.to_json() if result.workspace is not None else {}),
    }


class _Turns:
    """``-v``: the agent's turns on stderr as they arrive, condensed as ``ironflow logs`` shows
    them (:mod:`ironflow.claude.turns`), credential-shaped values redacted, control characters
    shown as escapes."""

    def log(self, stream: str, line: str) -> None:
        shown = turns.describe(line) if stream == "stdout" else [f"stderr: {line}"]
        for text in shown:
            print(printable(redact(text)), file=sys.stderr, flush=True)


async def _run_step(config: AgentConfig, provider: AgentProvider, sink: LogSink | None) -> AgentResult:
    """Run the step, then close the provider (and the API clients it opened on this loop)."""
    async with provider:
        return await provider.run(config, logs=sink)


async def _run_faked(
    config: AgentConfig,
    script: Script,
    isolation: Isolation,
    timeout_s: float,
    git_hosts: GitHosts | None,
    sink: LogSink | None,
    relays: tuple[RelaySpec, ...] = (),
) -> AgentResult:
    """Run the step locally against the offline model server answering ``script``."""
    from ironflow.local.offline import OfflineProvider

    provider = OfflineProvider(
        script,
        isolation=isolation.value,
        timeout=timeout_s,
        git_hosts=git_hosts,
        relays=relays,
        relay_upstream=backends.relay_upstream() if relays else None,
    )
    return await _run_step(config, provider, sink)


def agent(
    prompt: Annotated[
        str | None, typer.Argument(help="What to ask the agent; - reads it from stdin.", show_default=False)
    ] = None,
    backend: Annotated[Backend, typer.Option(help="Where the step runs.")] = Backend.LOCAL,
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bubblewrap or gVisor (runsc).")] = (
        Isolation.BWRAP
    ),
    fake_model: Annotated[
        bool,
        typer.Option(
            "--fake-model",
            help="Answer from the offline model server; --fake-model=FILE scripts it (YAML). No key needed.",
        ),
    ] = False,
    fake_model_script: Annotated[Path | None, typer.Option("--fake-model-script", hidden=True)] = None,
    model: Annotated[str | None, typer.Option(help="Model name, e.g. sonnet or claude-sonnet-5-5.")] = None,
    output: Annotated[
        ResultFormat, typer.Option("--output", "-o", help="text: the answer; json or yaml: answer and usage.")
    ] = ResultFormat.TEXT,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            show_default=False,
            help=f"The step's timeout in seconds (a provider's shorter one still holds; local: {DEFAULT_TIMEOUT_S:g}).",
        ),
    ] = None,
    provider_file: Annotated[
        Path | None,
        typer.Option(
            "--provider",
            help="--backend k8s: provider YAML (K8sEphemeralProvider); agent-sandbox: AgentSandboxProvider's YAML; "
            "local: a file of relays: (hosts reached with a credential the proxy injects).",
        ),
    ] = None,
    workspace: ws.WorkspaceOption = None,
    patch: ws.PatchOption = None,
    apply: ws.ApplyOption = False,
    push: ws.PushOption = None,
    allowed_tools: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-tools",
            help="Tools the agent may use without asking, e.g. Edit,Write or 'Bash(git diff:*)'; repeatable.",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show the agent's turns on stderr as they happen.")
    ] = False,
    continue_session: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="Carry on the latest conversation (k8s or agent-sandbox with sandbox.sessions_claim).",
        ),
    ] = False,
    resume: Annotated[
        str | None,
        typer.Option("--resume", metavar="SESSION", help="Carry on conversation SESSION (an earlier session_id)."),
    ] = None,
    untrusted_files: untrusted.UntrustedOption = None,
) -> None:
    """Run one agent step (the real Claude Code CLI) in a single-use sandbox; print the answer."""
    text = untrusted.prompt_with(_prompt(prompt), untrusted_files)
    if continue_session and resume is not None:
        exits.fail("--continue and --resume SESSION cannot be combined: --continue takes the latest conversation")
    script = backends.fake_script(fake_model, fake_model_script, backends.BUILTIN_AGENT_REPLY)
    spec = ws.workspace(workspace, patch=patch, apply=apply, push=push, pods=backend is Backend.K8S)
    tools = _tools(allowed_tools)
    if model is not None and not model.strip():
        exits.fail("--model must name a model, e.g. sonnet; leave it out for the default")
    if timeout is not None:
        inputs.seconds(timeout, "--timeout")
    if script is not None and backend is not Backend.LOCAL:
        exits.fail("--fake-model runs only with --backend local")
    try:
        options: dict[str, Any] = {"workspace": spec, "allowed_tools": tools}
        options.update(continue_session=continue_session, resume_session_id=resume, timeout=timeout)
        config = AgentConfig(text, **options) if model is None else AgentConfig(text, model=model, **options)
        sink = _Turns() if verbose else None
        if (continue_session or resume is not None) and (script is not None or backend is Backend.LOCAL):
            exits.fail(_NO_CONVERSATIONS)
        relays = backends.local_relays(provider_file) if backend is Backend.LOCAL else ()
        if script is not None:
            with _progress(f"running the step in a {isolation.value} sandbox", quiet=verbose or verbosity.quiet()):
                limit = timeout or DEFAULT_TIMEOUT_S
                result = asyncio.run(_run_faked(config, script, isolation, limit, ws.git_hosts(spec), sink, relays))
        else:
            if backend is Backend.LOCAL:
                _require_credential_env()
            provider = backends.build_provider(
                backend,
                provider_file=provider_file,
                isolation=isolation,
                timeout=timeout,
                git_hosts=ws.git_hosts(spec),
                relays=relays,
            )
            if (continue_session or resume is not None) and backends.conversations_claim_of(provider) is None:
                exits.fail(_NO_CONVERSATIONS)
            with _progress(f"running the step in {backends.where(provider)}", quiet=verbose or verbosity.quiet()):
                result = asyncio.run(_run_step(config, provider, sink))
    except errors.IronflowError as exc:
        exits.fail_for(exc)
    for ignored in result.ignored_settings:
        verbosity.note(f"ignored locally: {ignored}")
    ws.write_patch(result.workspace, patch)
    answer = sys.stderr if patch == "-" else sys.stdout  # a patch on stdout is all that is there
    if output is not ResultFormat.TEXT:
        print(document(_result_json(result), output), file=answer)
    else:
        print(for_terminal(result.text, answer) if result.text else json.dumps(result.value, default=str), file=answer)


async def _run_pod(
    run: PodRun, settings: ProviderSettings, spec: Workspace | None
) -> tuple[PodRunOutput, WorkspaceChanges | None]:
    from ironflow.k8s.workspaces import command_pods

    async with await backends.connect(settings.cluster) as client:
        if spec is None:
            return await run.run(client), None
        return await command_pods.run_in_workspace(client, settings, run, spec, now=int(time.time()))


def _exec_k8s(
    argv: list[str], provider_file: Path | None, timeout: float, spec: Workspace | None, patch: str | None,
    output: ResultFormat,
) -> NoReturn:  # fmt: skip
    """Run ``argv`` once in a hardened pod placed as the provider file says (on a clone of a
    git workspace, if given); exit like local."""
    from ironflow.k8s.commands import pod_runs
    from ironflow.k8s.workspaces import command_pods

    provider = backends.k8s_provider(provider_file)
    if provider.settings.relays:  # refused, never silently dropped
        exits.fail("relays: in the provider file reach agent steps on --backend k8s; exec pods do not get them yet")
    hosts = ws.git_hosts(spec)
    settings = provider.settings if hosts is None else backends.with_git_hosts(provider, hosts).settings
    try:
        if spec is not None:
            command_pods.check(settings, spec)
        run = pod_runs.exec_pod_run(
            settings, argv, timeout_s=timeout, now_ms=time.time_ns() // 1_000_000, rand32=secrets.randbits(32)
        )
        with _progress(f"running the command in pod {run.name} ({run.settings.namespace})", quiet=verbosity.quiet()):
            result, changes = asyncio.run(_run_pod(run, settings, spec))
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
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bubblewrap or gVisor (runsc).")] = (
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
            "(hosts reached with a credential the proxy injects).",
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
) -> None:
    """Run -- CMD ARGS… in a single-use sandbox without network; exit with its exit code.

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
    if backend is Backend.K8S:
        if mount:
            exits.fail("--mount runs on --backend local; on k8s mount a PVC in the provider file")
        _exec_k8s(argv, provider_file, timeout, _pod_workspace(spec), patch, output)
    given = ws.read_stdin(stdin)
    # Text output streams as the command writes it; -o json holds it for the one document at the end.
    streamed = _Stream(sys.stderr if patch == "-" else sys.stdout) if output is ResultFormat.TEXT else None
    relays = backends.local_relays(provider_file)
    try:
        provider = LocalSandboxProvider(
            isolation=isolation.value,
            timeout=timeout,
            git_hosts=ws.git_hosts(spec),
            relays=relays,
            relay_upstream=backends.relay_upstream() if relays else None,
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
    """Add ``agent`` and ``exec`` to the ``ironflow`` app."""
    app.command("agent", cls=backends.FakeModelCommand)(agent)
    app.command(
        "exec",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(exec_command)
