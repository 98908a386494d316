"""``ironflow agent``: one agent step in a sandbox (``ironflow exec`` is :mod:`ironflow.cli.exec_command`).

Thin over :class:`~ironflow.local.sandbox_provider.LocalSandboxProvider` (and, with
``--backend k8s``, the Kubernetes provider; with ``--backend agent-sandbox``,
:class:`~ironflow.agent_sandbox.claim_provider.AgentSandboxProvider`: a claimed sandbox, warm
from the file's pool when one is ready). The answer goes to stdout; progress to stderr (rich,
only on a terminal). Exit codes are :mod:`ironflow.cli.exits`'s. The local backend (the
default) is imported here; the others where they run. ``--allow-host``, ``--egress-profile`` and
``--egress`` open the sandbox's egress proxy (:mod:`ironflow.cli.egress_options`): the local one,
or on k8s and agent-sandbox the provider's auth proxy, added to the provider file's ``egress:``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ironflow import errors
from ironflow.claude import turns
from ironflow.cli import backends, exits, inputs, shared_options, untrusted, verbosity
from ironflow.cli import egress_options as egress_cli
from ironflow.cli import workspace as ws
from ironflow.cli.backends import Backend, Isolation
from ironflow.cli.formats import ResultFormat, document, for_terminal, printable
from ironflow.fake_model.script import Script
from ironflow.local.sandbox_provider import DEFAULT_TIMEOUT_S
from ironflow.provider import AgentProvider, LogSink
from ironflow.results import AgentResult
from ironflow.secrets import redact
from ironflow.steps import AgentConfig

if TYPE_CHECKING:
    from ironflow.auth_proxy.git_hosts import GitHosts
    from ironflow.auth_proxy.relays import RelaySpec
    from ironflow.egress import EgressPolicy

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
def progress(message: str, *, quiet: bool = False) -> Iterator[None]:
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
        shown = (
            turns.describe(line)
            if stream == "stdout"
            else [f"{'[ironflow]' if stream == 'ironflow' else 'stderr:'} {line}"]
        )
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
    egress: EgressPolicy | None = None,
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
        egress=egress,
    )
    return await _run_step(config, provider, sink)


def agent(
    prompt: Annotated[
        str | None, typer.Argument(help="What to ask the agent; - reads it from stdin.", show_default=False)
    ] = None,
    backend: Annotated[Backend, typer.Option(help="Where the step runs.")] = Backend.LOCAL,
    isolation: Annotated[Isolation, typer.Option(help="Local sandbox: bwrap, gvisor (runsc) or docker.")] = (
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
            "local: a file of relays: (hosts reached with a credential the proxy injects), egress: and "
            "egress_profiles:.",
        ),
    ] = None,
    workspace: shared_options.WorkspaceOption = None,
    patch: shared_options.PatchOption = None,
    apply: shared_options.ApplyOption = False,
    push: shared_options.PushOption = None,
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
    allow_host: shared_options.AllowHostOption = None,
    egress_profile: shared_options.EgressProfileOption = None,
    egress_file: shared_options.EgressFileOption = None,
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
        found = egress_cli.local_file(provider_file) if backend is Backend.LOCAL else egress_cli.LocalFile()
        if backend is not Backend.LOCAL and egress_profile:  # the file's own profiles too (its egress: merges later)
            found = egress_cli.LocalFile(profiles=backends.file_egress_profiles(backend, provider_file))
        policy = egress_cli.command_policy(allow_host, egress_profile, egress_file, found)
        relays = found.relays
        if script is not None:
            with progress(f"running the step in a {isolation.value} sandbox", quiet=verbose or verbosity.quiet()):
                limit = timeout or DEFAULT_TIMEOUT_S
                hosts = ws.git_hosts(spec)
                result = asyncio.run(_run_faked(config, script, isolation, limit, hosts, sink, relays, policy))
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
                egress=policy,
            )
            if (continue_session or resume is not None) and backends.conversations_claim_of(provider) is None:
                exits.fail(_NO_CONVERSATIONS)
            with progress(f"running the step in {backends.where(provider)}", quiet=verbose or verbosity.quiet()):
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


def register(app: typer.Typer) -> None:
    """Add ``agent`` to the ``ironflow`` app."""
    app.command("agent", cls=shared_options.FakeModelCommand)(agent)
