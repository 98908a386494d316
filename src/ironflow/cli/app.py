"""The ``ironflow`` command: Typer commands, thin over the library, loaded when they run.

Each topic module (``cli/<topic>.py``) exposes ``register(app)``. A command's module imports
its backend, and a backend the Kubernetes client or aiohttp (about a second), so the app
imports a topic only when one of its commands runs or shows its own help: this is the CLI's
one deferred import, and ``ironflow --help`` lists :data:`COMMANDS` without loading any of
them. Results go to stdout, progress and errors to stderr; bad input exits 2 with one line.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["COMMANDS", "app", "load_command", "main", "registered_commands"]

#: Command name -> (topic module, the one-line help ``ironflow --help`` shows), in listing order.
#: tests/cli/unit/test_cli_app.py holds each line to its command's own docstring.
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "agent": (
        "ironflow.cli.agent",
        "Run one agent step (the real Claude Code CLI) in a single-use sandbox; print the answer.",
    ),
    "exec": (
        "ironflow.cli.agent",
        "Run -- CMD ARGS… in a single-use sandbox without network; exit with its exit code.",
    ),
    "render": ("ironflow.cli.render", "Print the Kubernetes objects a step would create (dry run; nothing is sent)."),
    "run": ("ironflow.cli.run", "Queue a run of WORKFLOW (a worker takes it), or execute it here with --wait."),
    "worker": ("ironflow.cli.run", "Take queued runs from the store and execute them until Ctrl-C."),
    "runs": ("ironflow.cli.runs", "List, show, cancel and retry runs."),
    "manifests": (
        "ironflow.cli.manifests",
        "Print the namespace, RBAC, network policies, RuntimeClass and presets of a cluster.",
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
        "Sandbox sessions (serve, open, exec, cp, ls, close) and agent-sandbox (render, apply-template, reap).",
    ),
    "dev": ("ironflow.cli.dev", "Development helpers: an offline Anthropic API."),
}


def load_command(name: str) -> Any:
    """The command ``name`` as its topic module registers it (a Typer-built click command), or
    None for an unknown name."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    return _registered(entry[0]).get(name)


def _registered(module: str) -> dict[str, Any]:
    """The commands a topic module registers, by name."""
    scratch = typer.Typer()
    scratch.callback()(_root)  # a group even for a one-command topic (Typer collapses those)
    importlib.import_module(module).register(scratch)
    return dict(getattr(typer.main.get_command(scratch), "commands", {}))


class _LazyGroup(TyperGroup):
    """Lists :data:`COMMANDS` from the table; imports a topic when one of its commands is used.

    While the group's own help is drawn, each command is a stand-in carrying its table line,
    so ``ironflow --help`` imports no topic.
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if self._listing and cmd_name in COMMANDS:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="ironflow",
    cls=_LazyGroup,
    help="Run AI-agent steps in hardened, single-use sandboxes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run AI-agent steps in hardened, single-use sandboxes."""


def registered_commands() -> set[str]:
    """Every command the topic modules register (each must be listed in :data:`COMMANDS`)."""
    return {name for module in dict.fromkeys(m for m, _ in COMMANDS.values()) for name in _registered(module)}


def main() -> None:
    app()
