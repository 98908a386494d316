"""``ironflow exec``: its options, as Typer reads them; what it does is :mod:`ironflow.cli.one_shot`.

One command in a single-use sandbox, locally or in a Kubernetes pod: its exit code passed
through (on k8s, whose pod reports only its phase, a failed command is 1), a timed-out command a
failed step (1). No network unless ``--allow-host``, ``--egress-profile``, ``--egress`` or the
provider file's ``egress:`` open the egress proxy, reached with an egress-only token (no Claude
credential needed; on k8s the provider's auth proxy issues it and revokes it when the pod is
gone). It does not run on agent-sandbox. A local ``exec`` loads no Kubernetes client,
agent-sandbox, model server or HTTP stack until its sandbox starts; its common call loads no
Typer either (:mod:`ironflow.cli.quick`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ironflow.cli import one_shot, shared_options
from ironflow.cli.formats import ResultFormat
from ironflow.cli.inputs import Backend, Isolation
from ironflow.local.sandbox_provider import DEFAULT_TIMEOUT_S

__all__ = ["register"]


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
    workspace: shared_options.WorkspaceOption = None,
    patch: shared_options.PatchOption = None,
    apply: shared_options.ApplyOption = False,
    push: shared_options.PushOption = None,
    mount: shared_options.MountOption = None,
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
    allow_host: shared_options.AllowHostOption = None,
    egress_profile: shared_options.EgressProfileOption = None,
    egress_file: shared_options.EgressFileOption = None,
) -> None:
    """Run -- CMD ARGS… in a single-use sandbox (no network unless --allow-host); exit with its exit code.

    Piped standard input reaches the command (``echo x | ironflow exec -- cat``)."""
    one_shot.run(
        list(ctx.args),
        backend=backend,
        isolation=isolation,
        timeout=timeout,
        provider_file=provider_file,
        workspace=workspace,
        patch=patch,
        apply=apply,
        push=push,
        mount=mount,
        output=output,
        stdin=stdin,
        allow_host=allow_host,
        egress_profile=egress_profile,
        egress_file=egress_file,
    )


def register(app: typer.Typer) -> None:
    """Add ``exec`` to the ``ironflow`` app."""
    app.command(
        "exec",
        # Options end at the command's first word (``exec ls -l`` runs ``ls -l``), and a misspelt
        # option before it is an error, not the command to run.
        context_settings={"allow_extra_args": True, "allow_interspersed_args": False},
    )(exec_command)
