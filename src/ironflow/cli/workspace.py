"""The workspace options of ``ironflow agent`` and ``ironflow exec``, and where their patch goes.

``--workspace DIR`` runs the step in a private copy of DIR at ``/workspace`` (its working
directory); ``--workspace GIT_URL[@REF]`` in a clone made through the auth proxy, whose token
for the host comes from ``IRONFLOW_GIT_TOKEN`` and stays in the proxy; ``--workspace
pvc:NAME[/SUBPATH]`` (Kubernetes) on a PersistentVolumeClaim, written in place. ``--patch FILE``
writes what the step changed there as a git patch (``-``: stdout, and then the step's own
output goes to stderr); ``--apply`` writes the changes into DIR after a successful step, and
``--push BRANCH`` commits and pushes a git workspace's. ``--mount SRC:DST[:ro|rw]`` (``exec``)
shows more host directories. Each bad value exits 2 with one line (:func:`~ironflow.cli.exits.fail`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ironflow import errors
from ironflow.cli import exits
from ironflow.cli.formats import TerminalStream
from ironflow.secrets import Secret
from ironflow.workspaces import Workspace, WorkspaceChanges, is_git_source, is_pvc_source

if TYPE_CHECKING:
    from ironflow.local.workspaces.git_sync import GitHosts

__all__ = [
    "git_hosts",
    "workspace",
    "write_patch",
]


#: The git host token a git workspace's proxy injects, read from the worker's environment.
GIT_TOKEN_ENV: Final = "IRONFLOW_GIT_TOKEN"  # noqa: S105 - a variable name
#: The Basic user name sent with it (GitHub and GitLab take any; x-access-token by default).
GIT_USERNAME_ENV: Final = "IRONFLOW_GIT_USERNAME"
#: A mirror the proxy relays the git host to instead: ``<mirror>/<host>/<path>``.
GIT_UPSTREAM_ENV: Final = "IRONFLOW_GIT_UPSTREAM"


def workspace(
    text: str | None, *, patch: str | None, apply: bool, push: str | None = None, pods: bool = False
) -> Workspace | None:
    """The ``--workspace`` value, or None; exits 2 on a value that cannot work (a PVC unless
    ``pods``: the backend runs steps in Kubernetes pods)."""
    if text is None:
        if patch is not None or apply or push is not None:
            exits.fail("--patch, --apply and --push need --workspace DIR|GIT_URL")
        return None
    if is_pvc_source(text):
        if not pods:
            exits.fail("--workspace pvc:NAME runs on --backend k8s: a PersistentVolumeClaim is mounted in the pod")
        if push is not None:
            exits.fail("--push needs a git workspace: --workspace https://host/org/repo.git[@REF]")
        try:
            return Workspace(text, apply=apply)
        except errors.ConfigError as exc:
            exits.fail(f"--workspace: {exc.message}")
    git = is_git_source(text)
    if git and apply:
        exits.fail("--apply writes a directory; a git workspace's change goes back with --push BRANCH")
    if not git:
        if push is not None:
            exits.fail("--push needs a git workspace: --workspace https://host/org/repo.git[@REF]")
        if not Path(text).is_dir():
            exits.fail(f"--workspace '{text}' is not a directory")
    if patch is not None and patch != "-":
        target = Path(patch)
        if target.is_dir() or not target.parent.is_dir():
            exits.fail(f"--patch '{patch}' must name a file in an existing directory")
        inside = os.path.realpath(target.parent)
        root = os.path.realpath(text)
        if not git and (inside == root or inside.startswith(root + os.sep)):
            exits.fail(f"--patch '{patch}' is inside the workspace; write it elsewhere")
    try:
        return Workspace.parse(text, apply=apply, push_branch=push) if git else Workspace(text, apply=apply)
    except errors.ConfigError as exc:
        exits.fail(f"--workspace: {exc.message}")


def git_hosts(spec: Workspace | None) -> GitHosts | None:
    """The git host credential of a git workspace, from :data:`GIT_TOKEN_ENV`; exits 2 without it."""
    if spec is None or not spec.is_git:
        return None
    token = os.environ.get(GIT_TOKEN_ENV, "").strip()
    if not token:
        exits.fail(f"a git workspace needs the host's token in {GIT_TOKEN_ENV} (it stays in the proxy)")
    username = os.environ.get(GIT_USERNAME_ENV, "").strip() or "x-access-token"
    mirror = os.environ.get(GIT_UPSTREAM_ENV, "").strip() or None
    from ironflow.local.workspaces.git_sync import GitCredential, GitHosts  # a git workspace's only

    return GitHosts({spec.git_host: GitCredential(Secret(token), username)}, upstream=mirror)


def write_patch(changes: WorkspaceChanges | None, patch: str | None) -> None:
    """Write the patch where ``--patch`` says (nothing without it); exits 2 when it cannot."""
    if patch is None or changes is None:
        return
    if patch == "-":
        TerminalStream(sys.stdout).write(changes.patch, final=True)  # exact to a pipe; shown safe to a terminal
        return
    try:
        Path(patch).write_bytes(changes.patch)
    except OSError as exc:
        exits.fail(f"--patch '{patch}' could not be written: {exc.strerror}")
