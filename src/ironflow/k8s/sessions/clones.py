"""A cluster session's git workspace: cloned by an exec at open, its patch by another on request (I/O).

A sandbox session's pod (a Kubernetes session's, an agent-sandbox claim's) runs before its
workspace exists, so the workspace is cloned as an agent-sandbox step's is
(:mod:`ironflow.k8s.workspaces.clone_exec`): an exec in the pod with the ``ifap_`` token of a grant
of its own on stdin, for the git host only (the host's credential stays in the proxy), the
grant revoked on every path once the exec ends (:func:`exec_with_grant`, the steps' too).
:func:`changes` runs the pod steps' report against the starting commit the worker recorded.
A host directory makes no sense on a cluster, and neither does applying the patch to one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from ironflow import errors, labels
from ironflow.auth_proxy import issuing, revoking, tokens
from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import clone_exec as workspace_clone
from ironflow.kube import api as kube
from ironflow.workspaces import Workspace, WorkspaceChanges, frames

__all__ = [
    "Held",
    "changes",
    "check",
    "clone",
    "exec_with_grant",
    "held_of",
    "refuse_apply",
    "workspace_annotations",
]


#: An exec's argv from the proxy's URL and the size of the token its stdin carries.
Render = Callable[[str, int], tuple[str, ...]]


def check(settings: ProviderSettings, spec: Workspace) -> tokens.SecretCredential:
    """The proxied secret a session's workspace clones with, before anything is created.

    Raises:
        WorkspaceRefused: a host directory or a PVC (a session clones a git URL), a push
            branch, no auth proxy, no credential for the workspace's git host.
    """
    if not spec.is_git:
        raise errors.WorkspaceRefused(
            f"a cluster session's pod cannot see '{spec.source}' on this machine: give its workspace as "
            "GIT_URL[@REF] (cloned in the pod through the auth proxy)"
        )
    if spec.push_branch is not None:
        raise errors.WorkspaceRefused("a session's workspace cannot push: take its patch with changes()")
    if settings.auth_proxy_url is None:
        raise errors.WorkspaceRefused(
            "a git workspace on a cluster session needs auth_proxy(url): the pod clones through the proxy's git relay"
        )
    return (settings.git_hosts or GitHosts()).secret_for(spec.git_host)


def refuse_apply() -> errors.WorkspaceRefused:
    """What ``changes(apply=True)`` says on a cluster: there is no host directory to write."""
    return errors.WorkspaceRefused(
        "a cluster session's workspace has no host directory to apply to: take its patch (sandbox diff --patch FILE)"
    )


async def exec_with_grant(
    api: kube.KubeApi,
    render: Render,
    *,
    issuer: issuing.TokenIssuer,
    secret: tokens.SecretCredential,
    proxy_url: str,
    namespace: str,
    pod: str,
    container: str,
    run_id: str,
    step: str,
    expires_at: int,
) -> tuple[kube.ExecResult, str]:
    """Run ``render``'s exec with a fresh grant for ``secret`` on its stdin, revoked on every
    path once the exec ends; the exec's result and the token (to mask it in what git said)."""
    async with revoking.held(issuer) as held:  # the exec is done (or cancelled): so is its grant
        _, token = await held.secret_token(secret, run_id, step, expires_at)
        raw = token.reveal().encode()
        done = await api.exec(namespace, pod, render(proxy_url, len(raw)), container=container, stdin=raw)
    return done, token.reveal()


async def clone(
    api: kube.KubeApi,
    spec: Workspace,
    *,
    issuer: issuing.TokenIssuer,
    secret: tokens.SecretCredential,
    proxy_url: str,
    where: workspace_clone.WorkspacePaths,
    namespace: str,
    pod: str,
    container: str,
    session_id: str,
    expires_at: int,
) -> str:
    """Clone ``spec`` into the session's pod and return the starting commit.

    Raises:
        WorkspaceUnsafe: the clone failed, or printed no starting commit.
        AuthProxyError: the grant could not be issued.
    """
    done, _ = await exec_with_grant(
        api, lambda proxy, size: workspace_clone.clone_exec(proxy, spec, size, where),
        issuer=issuer, secret=secret, proxy_url=proxy_url, namespace=namespace, pod=pod, container=container,
        run_id=session_id, step="workspace",
        expires_at=expires_at,
    )  # fmt: skip
    if done.exit_code != 0:
        # git's own words can quote the URL; only the exit code is said.
        raise errors.WorkspaceUnsafe(f"the workspace's clone failed in session pod '{pod}' (exit {done.exit_code})")
    return workspace_clone.parse_commit(done.stdout)


async def changes(
    api: kube.KubeApi,
    held: Held,
    *,
    where: workspace_clone.WorkspacePaths,
    namespace: str,
    pod: str,
    container: str,
) -> WorkspaceChanges:
    """Everything changed in the session's workspace since its clone: the patch and the changed files.

    Raises:
        WorkspaceUnsafe: the report refused (a special file, a file or patch over its limit,
            a base that no longer holds the starting commit) or came back malformed.
    """
    argv = workspace_clone.report_exec(held.spec, held.commit, where)
    done = await api.exec(namespace, pod, argv, container=container)
    _, found = frames.split_frame(done.stdout.decode(errors="replace"))
    if found is None:  # the clone made a repository: without one the workspace was tampered with
        raise errors.WorkspaceUnsafe("the session's workspace no longer holds its git repository")
    return found


@dataclasses.dataclass(frozen=True)
class Held:
    """A session's git workspace and the starting commit its clone recorded."""

    spec: Workspace
    commit: str


def workspace_annotations(held: Held) -> dict[str, str]:
    """What the session's object records of its workspace, for another process's ``changes`` (pure).

    The pod cannot write its own object (no service-account token): the commit stays the worker's.
    """
    out = {labels.ANNOTATION_WORKSPACE_SOURCE: held.spec.source, labels.ANNOTATION_WORKSPACE_COMMIT: held.commit}
    if held.spec.ref is not None:
        out[labels.ANNOTATION_WORKSPACE_REF] = held.spec.ref
    return out


def held_of(annotations: Mapping[str, str] | None) -> Held | None:
    """The workspace :func:`workspace_annotations` recorded, or None when the session has none (pure)."""
    found = annotations or {}
    source, commit = found.get(labels.ANNOTATION_WORKSPACE_SOURCE), found.get(labels.ANNOTATION_WORKSPACE_COMMIT)
    if not source or not commit:
        return None
    return Held(Workspace(source, ref=found.get(labels.ANNOTATION_WORKSPACE_REF)), commit)
