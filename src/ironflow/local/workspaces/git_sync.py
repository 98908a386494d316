"""A git workspace on this machine: cloned in a sandbox through the auth proxy, pushed the same way (I/O).

The clone runs in a sandbox of its own, shaped like the step's, whose only way out is the
in-process proxy's secret relay: it holds an opaque token for the git host, and the proxy
injects the host's credential (:mod:`ironflow.workspaces.git_script` renders the git commands, the
token in their environment only). The clone is then the workspace's source, copied for the
step as a host directory is (:mod:`ironflow.local.workspaces.copies`), so the step never writes the
clone and its ``.git`` changes never count.

The push applies the step's changes to the clean clone, never to the step's copy (whose
``.git`` the step could have rigged with hooks or an ``insteadOf``), then commits and pushes to
a new branch from a sandbox with a fresh token.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from ironflow import errors
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.claude import command
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, environment, launch, step_proxy
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.local.workspaces import writeback
from ironflow.workspaces import WORKSPACE_PATH, Workspace, WorkspaceChanges, git_script

__all__ = ["GitCredential", "GitHosts", "clone", "push"]

#: The git commands of one phase, given the proxy's address in the sandbox and the phase's token.
_Render = Callable[[str, str], git_script.GitInvocation]

_SOCKET = "git.sock"
_CLONE_DIR = "clone"


async def _in_sandbox(
    processes: launch.SandboxProcesses,
    shape: sandbox_argv.SandboxShape,
    hosts: GitHosts,
    spec: Workspace,
    directory: str,
    run_dir: str,
    render: _Render,
    *,
    limit_s: float,
    what: str,
    before: Sequence[tuple[str, ...]] = (),
    extra_env: Mapping[str, str] | None = None,
) -> None:
    """Run ``before`` then the git commands ``render`` makes of the proxy's address and a token
    (valid for this run only) in a sandbox with ``directory`` at /workspace."""
    socket_path = os.path.join(run_dir, _SOCKET)
    proxy_url = f"http://127.0.0.1:{environment.PROXY_PORT}"
    async with step_proxy.secret_session(
        hosts.secret_for(spec.git_host),
        socket_path=socket_path,
        run_id="local",
        step=f"workspace {what}",
        expires_in=limit_s + 60,
        secret_upstream=hosts.upstream,
        max_connections=processes.limits.proxy_connections,
    ) as token:
        invocation = render(proxy_url, token.reveal())
        script = " && ".join(" ".join(command.shell_quote(a) for a in argv) for argv in (*before, *invocation.commands))
        env = {**environment.sandbox_env(), **invocation.env, **(extra_env or {})}
        with sandbox_argv.sandbox_fds(shape.isolation, env) as fds:
            argv, binds = sandbox_argv.render(
                shape,
                ("sh", "-c", script),
                tmp=run_dir,
                working_dir=None,
                mounts=(),
                writable=(bwrap.WritableMount(directory, WORKSPACE_PATH),),
                proxy_socket=socket_path,
                env=env,
                fds=fds,
            )
            finished = await processes.run(
                argv, stdin=None, limit_s=limit_s, sink=None, pass_fds=fds.inherited, binds=binds
            )
    said = finished.stderr.decode(errors="replace").replace(token.reveal(), "<token>").strip().splitlines()
    if finished.timed_out:
        raise errors.WorkspaceRefused(f"the git workspace {what} timed out after {limit_s:g} s")
    if finished.code != 0:
        last = errors.truncate(said[-1] if said else f"exit code {finished.code}", 500)
        raise errors.WorkspaceRefused(f"the git workspace {what} of '{spec.source}' failed: {last}")


async def clone(
    spec: Workspace,
    run_dir: str,
    *,
    processes: launch.SandboxProcesses,
    shape: sandbox_argv.SandboxShape,
    hosts: GitHosts,
    limit_s: float,
) -> local_workspaces.PreparedWorkspace:
    """Clone ``spec``'s repository at its ref in a sandbox, then copy the clone for the step.

    Raises:
        WorkspaceRefused: no credential for the host, or the clone failed (the git host's words).
    """
    directory = os.path.join(run_dir, _CLONE_DIR)
    os.mkdir(directory, 0o755)
    if shape.writable_uid is not None:
        os.chown(directory, shape.writable_uid, shape.writable_uid)

    def render(proxy_url: str, token: str) -> git_script.GitInvocation:
        return git_script.clone_commands(proxy_url, spec.source, token, directory=WORKSPACE_PATH, ref=spec.ref)

    await _in_sandbox(processes, shape, hosts, spec, directory, run_dir, render, limit_s=limit_s, what="clone")
    return local_workspaces.prepare(spec, run_dir, sandbox_uid=shape.writable_uid, source=directory)


async def push(
    prepared: local_workspaces.PreparedWorkspace,
    changes: WorkspaceChanges,
    *,
    processes: launch.SandboxProcesses,
    shape: sandbox_argv.SandboxShape,
    hosts: GitHosts,
    limit_s: float,
    message: str,
) -> WorkspaceChanges:
    """Commit ``changes`` onto the clean clone and push them to ``push_branch`` (nothing to push:
    nothing is pushed)."""
    branch = prepared.spec.push_branch
    if branch is None or not changes.files:
        return changes
    writeback.apply_changes(prepared, changes)

    def render(proxy_url: str, token: str) -> git_script.GitInvocation:
        return git_script.push_commands(proxy_url, prepared.spec.source, token, directory=WORKSPACE_PATH, branch=branch)

    commit = (
        ("git", "-C", WORKSPACE_PATH, "add", "--all"),
        ("git", "-C", WORKSPACE_PATH, "commit", "--quiet", "--no-verify", "--message", message),
    )
    run_dir = os.path.dirname(prepared.copy)
    await _in_sandbox(
        processes, shape, hosts, prepared.spec, prepared.source, run_dir, render,
        limit_s=limit_s, what="push", before=commit, extra_env=git_script.COMMITTER,
    )  # fmt: skip
    return WorkspaceChanges(changes.patch, changes.files, pushed_branch=branch)
