"""A git workspace cloned by an exec into a running pod, and its report by another (pure).

A pod that exists before its workspace (an agent-sandbox warm pod, a sandbox session's pod)
can have no init container: the clone is an exec of its own. It reads the ``ifap_`` token of
a grant for the git host only from stdin into its own environment
(:func:`ironflow.workspaces.git_script.clone_commands`: never a URL, an argv or ``.git/config``),
clones into the workspace, makes the base with :func:`~ironflow.k8s.workspaces.init_pods.base_script`
and prints the starting commit last, which the worker keeps. The worker revokes the grant as
soon as this exec ends.

The base sits where the pod's commands (the same uid) could write it, so a report never
trusts it: :func:`report_exec` reads it through a fresh git dir and re-hashes every object
reachable from the commit the worker recorded (``commit=`` of
:func:`~ironflow.k8s.workspaces.init_pods.report_script`) before the diff.

Never does I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Final

from ironflow import errors
from ironflow.claude import command
from ironflow.k8s.workspaces import init_pods
from ironflow.workspaces import Workspace, git_script

__all__ = ["TOKEN_MARK", "WorkspacePaths", "clone_exec", "parse_commit", "paths", "report_exec", "token_exports"]

#: Stands in for the token while rendering: ``<`` and ``>`` are in no source URL the relay takes.
TOKEN_MARK: Final = "<ironflow-token-mark>"  # noqa: S105 - a marker, never a token
_COMMIT_LINE: Final = re.compile(rb"ironflow_commit=([0-9a-f]{40}|[0-9a-f]{64})\n?\Z")


@dataclasses.dataclass(frozen=True)
class WorkspacePaths:
    """Where a pod's workspace and its base sit."""

    workspace: str
    base: str


def paths(home: str) -> WorkspacePaths:
    """The workspace and base under the pod's ``home`` (its root is read-only, HOME an emptyDir)."""
    return WorkspacePaths(f"{home}/workspace", f"{home}/.ironflow/workspace-base")


def token_exports(env: Mapping[str, str], token_bytes: int) -> str:
    """Shell that reads ``token_bytes`` of stdin and exports ``env``, the token (:data:`TOKEN_MARK`
    in a value) taken from the shell variable: never in the argv."""
    exports = [f"ironflow_token=$(head -c {int(token_bytes)})"]
    for name, value in env.items():
        head, mark, tail = value.partition(TOKEN_MARK)
        rendered = command.shell_quote(value) if not mark else f'{command.shell_quote(head)}"$ironflow_token"'
        if tail:
            rendered += command.shell_quote(tail)
        exports.append(f"export {name}={rendered}")
    return "\n".join(exports)


def clone_exec(proxy_url: str, spec: Workspace, token_bytes: int, where: WorkspacePaths) -> tuple[str, ...]:
    """The clone's argv: read ``token_bytes`` of stdin (the grant's token) into the clone's
    environment only, clone into ``where.workspace`` (retried while git cannot connect, as an init
    clone is: :func:`~ironflow.workspaces.git_script.connect_retried`), make the base, print
    ``ironflow_commit=<id>`` last.

    Raises:
        ConfigError: a source, ref or proxy URL the relay cannot take.
    """
    invocation = git_script.clone_commands(proxy_url, spec.source, TOKEN_MARK, directory=where.workspace, ref=spec.ref)
    clone = git_script.connect_retried(invocation.commands)  # the session's pod may be new to the policies
    base = init_pods.base_script(workspace=where.workspace, base=where.base)
    w, b = command.shell_quote(where.workspace), command.shell_quote(where.base)
    script = (
        "set -e\n" + token_exports(invocation.env, token_bytes) + f"\nrm -rf {w} {b}\n"
        f"mkdir -p {b}\n"
        f"( {clone}\n) >&2\n"
        "unset ironflow_token\n"
        f"( {base}) >&2\n"
        f'printf "ironflow_commit=%s\\n" "$(cat {b}/commit)"\n'
    )
    return ("sh", "-c", script)


def parse_commit(stdout: bytes) -> str:
    """The starting commit the clone exec printed last.

    Raises:
        WorkspaceUnsafe: no commit line (the clone's output is not quoted: it is the repository's).
    """
    match = _COMMIT_LINE.search(stdout[-200:])
    if match is None:
        raise errors.WorkspaceUnsafe("the workspace's clone reported no starting commit")
    return match.group(1).decode()


def report_exec(spec: Workspace, commit: str, where: WorkspacePaths) -> tuple[str, ...]:
    """The argv that prints the workspace's frame now (:func:`~ironflow.k8s.workspaces.init_pods.report_script`),
    the base verified against ``commit``: what a session's ``changes`` runs, while its commands may run on.

    Raises:
        ConfigError: ``commit`` is no full commit id.
    """
    report = init_pods.report_script(
        limit=init_pods.patch_limit(spec),
        max_file_bytes=spec.max_file_bytes,
        workspace=where.workspace,
        base=where.base,
        commit=commit,
    )
    return ("sh", "-c", f"{report}ironflow_report\n")
