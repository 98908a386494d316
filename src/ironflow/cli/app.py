"""The ``ironflow`` command: Typer commands, thin over the library, loaded when they run.

Each topic module (``cli/<topic>.py``) exposes ``register(app)``. A command's module imports
its backend, and a backend the Kubernetes client or aiohttp (about a second), so the app
imports a topic only when one of its commands runs or shows its own help (the CLI's one
deferred import, :mod:`ironflow.cli.lazy`), and ``ironflow --help`` lists :data:`COMMANDS`
without loading any of them. Results go to stdout, progress and errors to stderr; bad input exits 2 with one line.
"""

from __future__ import annotations

from typing import Any, Final

import typer

from ironflow import __version__
from ironflow.cli import exits, groups, lazy

__all__ = ["COMMANDS", "app", "load_command", "main", "registered_commands"]

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


def load_command(name: str) -> Any:
    """The command ``name`` as its topic module registers it (a Typer-built click command), or
    None for an unknown name."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    return lazy.registered(entry[0]).get(name)


app = groups.new_app(
    name="ironflow",
    cls=lazy.lazy_group(COMMANDS),
    help="Run AI-agent steps in hardened, single-use sandboxes.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"ironflow {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: int = typer.Option(
        0,
        "--verbose",
        "-v",
        count=True,
        show_default=False,
        help="ironflow's info logs on stderr (-vv: debug); before the command.",
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Results and errors only: no spinner, notes or warnings; before the command."
    ),
) -> None:
    """Run AI-agent steps in hardened, single-use sandboxes."""
    if verbose and quiet:
        exits.fail("-v and -q pull opposite ways: give one of them")
    from ironflow.cli import verbosity  # logging's set-up: a command's, never --help's

    verbosity.configure(verbose, quiet)


def registered_commands() -> set[str]:
    """Every command the topic modules register (each must be listed in :data:`COMMANDS`)."""
    return {name for module in dict.fromkeys(m for m, _ in COMMANDS.values()) for name in lazy.registered(module)}


def main() -> None:
    """The console script; the name is fixed so help, errors and shell completion say
    ``ironflow`` however the program was started (``python -m``, a wrapper)."""
    app(prog_name="ironflow")
