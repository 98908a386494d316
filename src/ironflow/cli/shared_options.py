"""The options several commands declare, as Typer reads them; the helpers that act on their
values (:mod:`~ironflow.cli.stores`, :mod:`~ironflow.cli.workspace`, …) import no Typer.

A command's module declares its options with Typer; what the values mean lives in modules Typer
never loads, so the common call of a hot command (:mod:`ironflow.cli.quick`) runs without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

__all__ = [
    "AllowHostOption",
    "ApplyOption",
    "ContextOption",
    "EgressFileOption",
    "EgressProfileOption",
    "FakeModelCommand",
    "KubeconfigOption",
    "MountOption",
    "PatchOption",
    "ProviderKubeconfigOption",
    "PushOption",
    "RunArgument",
    "StoreOption",
    "WorkspaceOption",
]

# -- The run a command names, and the store it reads --

RunArgument = Annotated[
    str, typer.Argument(metavar="RUN", help="The run's id, or its start (unique).", show_default=False)
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store", help="Store URL: sqlite:///path or postgresql://… (default $IRONFLOW_STORE).", show_default=False
    ),
]

# -- The workspace of ``agent`` and ``exec`` (:mod:`ironflow.cli.workspace`) --

WorkspaceOption = Annotated[
    str | None,
    typer.Option(
        "--workspace",
        help="Run in a private copy of DIR at /workspace (DIR is not written), in a clone of "
        "GIT_URL[@REF] made through the auth proxy (the host's token: IRONFLOW_GIT_TOKEN), or "
        "(--backend k8s) on the PersistentVolumeClaim pvc:NAME[/SUBPATH], written in place.",
        metavar="DIR|GIT_URL[@REF]|pvc:NAME",
        show_default=False,
    ),
]
PushOption = Annotated[
    str | None,
    typer.Option("--push", help="Git workspace: after a successful step, push its change to this new branch.",
                 metavar="BRANCH"),
]  # fmt: skip
PatchOption = Annotated[
    str | None,
    typer.Option("--patch", help="Write the workspace's changes as a git patch to FILE ('-': stdout).", metavar="FILE"),
]
ApplyOption = Annotated[
    bool, typer.Option("--apply", help="After a successful step, write its changes into the --workspace directory.")
]
MountOption = Annotated[
    list[str] | None,
    typer.Option("--mount", help="Show host directory SRC at DST: SRC:DST[:ro|rw] (ro by default); repeatable."),
]

# -- Egress (:mod:`ironflow.cli.egress_options`) --

AllowHostOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host",
        metavar="HOST[:PORT]",
        help="Let the sandbox reach HOST through the egress proxy (443 and 80; :* any port); repeatable.",
    ),
]
EgressProfileOption = Annotated[
    list[str] | None,
    typer.Option(
        "--egress-profile", metavar="NAME", help="Open a named egress profile (pypi, npm, github…); repeatable."
    ),
]
EgressFileOption = Annotated[
    list[Path] | None,
    typer.Option("--egress", metavar="FILE", help="An egress policy file (YAML or JSON); repeatable."),
]

# -- A cluster without a provider file (:func:`ironflow.cli.backends.kube_cluster`) --

#: ``--kubeconfig`` / ``--context`` of the commands that talk to a cluster without a provider
#: file; :func:`kube_cluster` turns them into a cluster.
KubeconfigOption = Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: the usual).")]
ContextOption = Annotated[str | None, typer.Option("--context", help="Kubeconfig context.")]
#: ``--kubeconfig`` of a command that also reads a provider file: it wins over the file's cluster.
ProviderKubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="Kubeconfig file (default: the provider file's cluster, else the usual)."),
]


class FakeModelCommand(TyperCommand):
    """Reads ``--fake-model=FILE`` as the flag plus its script: the bare flag takes no value,
    so ``ironflow agent --fake-model "a prompt"`` keeps its prompt."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        rewritten: list[str] = []
        for index, arg in enumerate(args):
            if arg == "--":
                rewritten += args[index:]
                break
            if arg.startswith("--fake-model="):
                rewritten += ["--fake-model", "--fake-model-script", arg.split("=", 1)[1]]
            else:
                rewritten.append(arg)
        parsed: list[str] = super().parse_args(ctx, rewritten)
        return parsed
