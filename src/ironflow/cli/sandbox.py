"""``ironflow sandbox``: sandbox sessions, and agent-sandbox's patterns, template and claims.

A group over a table, like ``ironflow`` itself (:mod:`ironflow.cli.lazy`): a session
command (:mod:`ironflow.cli.sandbox_sessions`, a client of ``serve``) loads neither the
server (:mod:`ironflow.cli.sandbox_serve`) nor the Kubernetes modules of the pattern commands
(:mod:`ironflow.cli.sandbox_patterns`); snapshots, forks, pause and extend are
:mod:`ironflow.cli.sandbox_snapshots`, a directory's watch :mod:`ironflow.cli.sandbox_watch`.
"""

from __future__ import annotations

from typing import Final

import typer

from ironflow.cli import groups, lazy

__all__ = ["COMMANDS", "register", "sandbox_app"]

_SERVE: Final = "ironflow.cli.sandbox_serve"
_SESSIONS: Final = "ironflow.cli.sandbox_sessions"
_PATTERNS: Final = "ironflow.cli.sandbox_patterns"
_LIFECYCLE: Final = "ironflow.cli.sandbox_lifecycle"
_TOKENS: Final = "ironflow.cli.sandbox_tokens"
_SNAPSHOTS: Final = "ironflow.cli.sandbox_snapshots"
_ROUTER: Final = "ironflow.cli.sandbox_cluster_router"
_WATCH: Final = "ironflow.cli.sandbox_watch"

#: Command name -> (module, the one-line help ``ironflow sandbox --help`` shows), in listing order.
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "serve": (
        _SERVE,
        "Serve sandbox sessions over HTTP (the clients' and the upstream SDK's endpoint).",
    ),
    "router": (
        _ROUTER,
        "Route agent-sandbox's SDK to sandbox runtimes in the cluster (the in-cluster sandbox-router-svc).",
    ),
    "open": (
        _SESSIONS,
        "Open a sandbox session and print it (-o json: its id, expiry, labels).",
    ),
    "exec": (
        _SESSIONS,
        "Run -- CMD ARGS… in an open session; stream its output and exit with its exit code.",
    ),
    "cp": (
        _SESSIONS,
        "Copy a file or a directory's contents: SRC ID:DST into a session, ID:SRC DST out of it.",
    ),
    "ls": (
        _SESSIONS,
        "List the open sessions of the server (with --provider: every session pod of its namespace).",
    ),
    "close": (
        _SESSIONS,
        "Close a session (every process in it dies), or all of them with --all.",
    ),
    "diff": (
        _SESSIONS,
        "The patch of everything changed in a session's workspace since it was opened.",
    ),
    "watch": (
        _WATCH,
        "Print the changes under a session's directory, one line each, until Ctrl-C or the session ends.",
    ),
    "snapshot": (
        _SNAPSHOTS,
        "Keep a session's files as a snapshot and print its id; `snapshot rm SNAPSHOT` deletes one.",
    ),
    "snapshots": (_SNAPSHOTS, "List the snapshots of the server's store: id, name, session, size, age."),
    "fork": (_SNAPSHOTS, "Open sessions that start with a snapshot of this one's files; print their ids."),
    "pause": (
        _SNAPSHOTS,
        "Pause a session: locally its processes freeze; on Kubernetes its pod goes and its HOME is kept "
        "(k8s: an archive; agent-sandbox: home_volume).",
    ),
    "unpause": (_SNAPSHOTS, "Let a paused session run again."),
    "extend": (_SNAPSHOTS, "Move a session's expiry: it now ends --ttl from now."),
    "render": (
        _PATTERNS,
        "Print the objects of an agent-sandbox pattern (dry run; nothing is sent).",
    ),
    "apply-template": (
        _PATTERNS,
        "Create or update the SandboxTemplate and SandboxWarmPool the provider's pod settings describe.",
    ),
    "reap": (
        _PATTERNS,
        "Delete ironflow's SandboxClaims whose ironflow.io/expires-at has passed (a crashed worker's).",
    ),
    "suspend": (
        _LIFECYCLE,
        "Suspend a sandbox: its pod is deleted, its PVCs and claim kept (operatingMode Suspended).",
    ),
    "resume": (_LIFECYCLE, "Resume a suspended sandbox: a new pod on the same PVCs (operatingMode Running)."),
    "wait": (
        _LIFECYCLE,
        "Wait until a raw Sandbox has a condition (kubectl wait --for=condition=Finished sandbox/NAME).",
    ),
    "pools": (_LIFECYCLE, "The status of each SandboxWarmPool: desired, ready, and claims adopted in the last hour."),
    "pool-scaler": (
        _LIFECYCLE,
        "Keep a SandboxWarmPool's replicas on its claims per minute (writes /scale; runs until stopped).",
    ),
    "deliver-token": (
        _TOKENS,
        "Give a rendered pattern's waiting agent its proxy token over exec, once its pod runs.",
    ),
    "install": (
        _LIFECYCLE,
        "Print (or with --apply apply) the pinned agent-sandbox controller, v1.0.3, with its CRDs and RBAC.",
    ),
}

sandbox_app = groups.new_app(
    name="sandbox",
    cls=lazy.lazy_group(COMMANDS),
    help="Sandbox sessions (serve, open, exec, cp, ls, close, diff) and agent-sandbox (render, apply-template, reap).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add ``ironflow sandbox`` to the app."""
    app.add_typer(sandbox_app, name="sandbox")
