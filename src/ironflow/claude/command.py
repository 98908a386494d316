"""The Claude Code command line of a step: argument list and ``sh -c`` command (pure).

Every sandbox (Kubernetes pod, local bubblewrap, agent-sandbox pod) runs the same
command built here, so a step behaves the same wherever it runs. Nothing here reads the
environment, the clock or a file: the caller passes the worker's ``IRONFLOW_ALLOW_BYPASS``
decision and the paths in. Invariant: every value that reaches the shell goes through
:func:`shell_quote`; a secret reaches the command only through
:func:`credentials_prefix` with an inline credential, which the reference allows on a
non-sandboxed provider (see docs/k8s-provider.md).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from ironflow import errors
from ironflow.claude import layout
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow import steps

__all__ = [
    "CONTEXT_LIMIT_1M",
    "CONTEXT_LIMIT_DEFAULT",
    "PROMPT_STDIN_THRESHOLD",
    "agent_shell_command",
    "build_args",
    "credentials_prefix",
    "format_f64",
    "prompt_file_path",
    "prompt_via_stdin",
    "shell_quote",
    "trace_prefix",
    "validate_prompt_size",
]

#: Prompts longer than this (UTF-8 bytes) go through stdin: the kernel caps one argv
#: entry (128 KiB on Linux), and a long prompt would hit it.
PROMPT_STDIN_THRESHOLD: Final = 100_000
CONTEXT_LIMIT_DEFAULT: Final = 200_000
CONTEXT_LIMIT_1M: Final = 1_000_000
_CHARS_PER_TOKEN: Final = 4


def validate_prompt_size(config: steps.AgentConfig) -> None:
    """Refuse a prompt that cannot fit the model's context, before anything is created.

    The estimate is the reference's (bytes / 4), cheap and deliberately rough: it only
    catches prompts that are certainly too large.

    Raises:
        PromptTooLarge: the estimate exceeds 200,000 tokens (1,000,000 for ``[1m]`` models).
    """
    chars = sum(
        len(text.encode()) for text in (config.prompt, config.system_prompt, config.append_system_prompt) if text
    )
    estimated = chars // _CHARS_PER_TOKEN
    limit = CONTEXT_LIMIT_1M if config.model.endswith("[1m]") else CONTEXT_LIMIT_DEFAULT
    if estimated > limit:
        raise errors.PromptTooLarge(chars, estimated, limit)


def prompt_via_stdin(config: steps.AgentConfig) -> bool:
    """Whether the prompt is too long for argv and must be piped in."""
    return len(config.prompt.encode()) > PROMPT_STDIN_THRESHOLD


def format_f64(value: float) -> str:
    """Format like Rust's ``f64`` Display: shortest round-trip digits, never an exponent.

    >>> format_f64(2.5), format_f64(1.0), format_f64(1e20), format_f64(1e-7)
    ('2.5', '1', '100000000000000000000', '0.0000001')
    """
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def build_args(config: steps.AgentConfig, *, allow_bypass: bool) -> list[str]:
    """The CLI arguments for ``config`` (without the ``claude`` path), in the reference's order.

    ``allow_bypass`` is the worker's ``IRONFLOW_ALLOW_BYPASS == "1"`` decision, passed in
    so this stays pure.

    Raises:
        ToolProfileUnsupported: the step names a tool profile; the CLI has none.
        StepConfigError: ``bypassPermissions`` without the worker's opt-in.
    """
    if config.tool_profile is not None:
        raise errors.ToolProfileUnsupported(
            f"tool profile '{config.tool_profile}' is not supported by the Claude Code provider; "
            "list the tools with allowed_tools/disallowed_tools instead"
        )
    args: list[str] = [] if prompt_via_stdin(config) else ["-p", config.prompt]
    args += ["--output-format", "stream-json", "--verbose"] if config.verbose else ["--output-format", "json"]
    for flag, value in _valued_options(config):
        if value is not None:
            args += [flag, value]
    if config.strict_mcp_config:
        args.append("--strict-mcp-config")
    if config.bare:
        args.append("--bare")
    args += _permission_args(config.permission_mode, allow_bypass=allow_bypass)
    if config.json_schema is not None:
        # Compact JSON, keys in the caller's order: one argv entry, no shell surprises.
        args += ["--json-schema", json.dumps(dict(config.json_schema), separators=(",", ":"))]
    if config.resume_session_id is not None:
        args += ["--resume", config.resume_session_id]
    elif config.continue_session:
        args.append("--continue")
    elif config.session_id is not None:
        args += ["--session-id", config.session_id]
    return args


def _valued_options(config: steps.AgentConfig) -> list[tuple[str, str | None]]:
    """The flags that take a value, in the reference's order; None leaves the flag out."""
    return [
        ("--system-prompt", config.system_prompt),
        ("--append-system-prompt", config.append_system_prompt),
        ("--model", config.model),
        ("--allowedTools", ",".join(config.allowed_tools) or None),
        ("--disallowedTools", ",".join(config.disallowed_tools) or None),
        ("--max-turns", None if config.max_turns is None else str(config.max_turns)),
        ("--max-budget-usd", None if config.max_budget_usd is None else format_f64(config.max_budget_usd)),
        ("--mcp-config", config.mcp_config),
    ]


def _permission_args(mode: steps.PermissionMode, *, allow_bypass: bool) -> list[str]:
    """The permission flags of ``mode``; bypassing needs the worker's opt-in.

    By the StrEnum's values: this module (shell quoting too) loads without the step's values."""
    if mode == "auto":
        return ["--permission-mode", "auto"]
    if mode == "dontAsk":
        return ["--permission-mode", "dontAsk"]
    if mode == "bypassPermissions":
        if not allow_bypass:
            raise errors.StepConfigError(f"BypassPermissions requires {layout.ALLOW_BYPASS_ENV}=1 environment variable")
        return ["--dangerously-skip-permissions"]
    return []


def shell_quote(value: str) -> str:
    """Single-quote ``value`` for ``sh``: the only special char inside is ``'`` itself.

    >>> shell_quote("it's")
    "'it'\\\\''s'"
    """
    return "'" + value.replace("'", "'\\''") + "'"


def prompt_file_path() -> str:
    """Where the prompt ConfigMap's key appears inside the sandbox."""
    return f"{layout.PROMPT_MOUNT_DIR}/{layout.PROMPT_KEY}"


def trace_prefix(traceparent: str | None) -> str:
    """Export the W3C trace context so the CLI's telemetry joins the worker's trace."""
    if not traceparent:
        return ""
    return f"export TRACEPARENT={shell_quote(traceparent)}; "


def credentials_prefix(*, from_secret: bool = False, inline: Secret | None = None) -> str:
    """Shell that writes ``~/.claude/.credentials.json`` before the CLI starts (§1.7).

    ``from_secret`` copies ``$IRONFLOW_CLAUDE_CREDENTIALS`` (a secretKeyRef: the value
    never appears in the pod spec) and wins over ``inline``. An ``inline`` credential is
    written into the command itself, as the reference does for non-sandboxed providers;
    sandboxed providers and providers with an auth proxy refuse it before this runs.
    """
    if from_secret:
        return (
            'mkdir -p "$HOME/.claude" && '
            f'printf \'%s\' "${layout.CREDENTIALS_ENV}" > "$HOME/.claude/.credentials.json" && '
        )
    if inline is not None:
        quoted = shell_quote(inline.reveal())  # the one place an inline credential leaves
        return f"mkdir -p $HOME/.claude && printf '%s' {quoted} > $HOME/.claude/.credentials.json && "
    return ""


def agent_shell_command(
    args: list[str],
    *,
    claude_path: str,
    working_dir: str | None,
    prefix: str = "",
    prompt_file: str | None = None,
) -> str:
    """The ``sh -c`` script of the agent container: prefix, ``cd``, then the CLI.

    ``prefix`` is the trace export and the home setup; ``prompt_file`` pipes a large
    prompt in with ``cat`` (the argument list then has no ``-p``).
    """
    quoted = " ".join(shell_quote(a) for a in args)
    invocation = f"{shell_quote(claude_path)} {quoted}".rstrip()
    if prompt_file is not None:
        invocation = f"cat {shell_quote(prompt_file)} | {invocation}"
    cd = f"cd {shell_quote(working_dir)} && " if working_dir else ""
    return f"{prefix}{cd}{invocation}"
