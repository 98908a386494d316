"""The table of ``ironflow``'s commands: each one's topic module and the line ``ironflow --help``
shows (pure data: the Typer group, :mod:`ironflow.cli.root`, and :mod:`ironflow.cli.app` read it)."""

from __future__ import annotations

from typing import Final

__all__ = ["COMMANDS"]

#: Command name -> (topic module, the one-line help ``ironflow --help`` shows), in listing order.
#: tests/cli/unit/test_cli_app.py holds each line to its command's own docstring.
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "agent": (
        "ironflow.cli.agent",
        "Run one agent step (the real Claude Code CLI) in a single-use sandbox; print the answer.",
    ),
    "exec": (
        "ironflow.cli.exec_command",
        "Run -- CMD ARGS… in a single-use sandbox (no network unless --allow-host); exit with its exit code.",
    ),
    "render": ("ironflow.cli.render", "Print the Kubernetes objects a step would create (dry run; nothing is sent)."),
    "run": ("ironflow.cli.run", "Queue a run of WORKFLOW (a worker takes it), or execute it here with --wait."),
    "worker": ("ironflow.cli.run", "Take queued runs from the store and execute them until Ctrl-C."),
    "temporal-worker": (
        "ironflow.cli.temporal",
        "Run ironflow steps (and the workflows of --workflows) for a Temporal task queue until Ctrl-C.",
    ),
    "runs": ("ironflow.cli.runs", "List, show, cancel and retry runs."),
    "logs": (
        "ironflow.cli.logs",
        "Print the transcripts of a run's agent steps; -f follows the run until it is finished.",
    ),
    "ps": (
        "ironflow.cli.ps",
        "List what is running now: running runs and steps (any backend), and this machine's local sandboxes.",
    ),
    "ui": (
        "ironflow.cli.ui",
        "Serve a web dashboard of the store's runs, steps, transcripts and live sandboxes.",
    ),
    "manifests": (
        "ironflow.cli.manifests",
        "Print the namespace, RBAC, network policies, RuntimeClass and presets of a cluster (and its Deployments).",
    ),
    "check": (
        "ironflow.cli.check",
        "Check a live sandbox: pod hardening, secrets, labels, RBAC, the auth proxy, exec probes.",
    ),
    "reap": (
        "ironflow.cli.reap",
        "Delete expired ironflow pods, Jobs, prompt ConfigMaps and environment claims in a namespace.",
    ),
    "auth-proxy": (
        "ironflow.cli.auth_proxy",
        "The auth proxy: pods hold an opaque token, the proxy holds the Claude credential.",
    ),
    "sandbox": (
        "ironflow.cli.sandbox",
        "Sandbox sessions (serve, open, exec, cp, ls, close, diff) and agent-sandbox (render, apply-template, reap).",
    ),
    "egress": ("ironflow.cli.egress", "Egress policies: check what a sandbox may reach."),
    "dev": ("ironflow.cli.dev", "Development helpers: an offline Anthropic API."),
}
