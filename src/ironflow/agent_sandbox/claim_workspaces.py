"""A git workspace on an agent-sandbox step: its clone and its push, in the claimed pod (I/O).

:func:`clone` issues the clone's grant (the workspace's git host only, a proxied secret: the
host's token stays in the proxy), runs
:func:`~ironflow.agent_sandbox.workspace_execs.clone_exec` with the grant's token on stdin,
revokes the grant on every path once the exec ends, and returns the starting commit the
step's report is verified against. :func:`push` does the same for a succeeded step's
``push_branch``, with a grant of its own, after writing the report's patch in by an exec
before it (nothing changed: nothing is pushed). The step's own exec and its report are the
runner's, and so is the claim, held until both are done.
"""

from __future__ import annotations

import asyncio

from ironflow import errors, steps, workspaces
from ironflow.agent_sandbox import deliveries, workspace_execs
from ironflow.agent_sandbox.step_render import AgentSandboxSettings
from ironflow.auth_proxy import issuing
from ironflow.k8s import step_manifests as pod_manifests
from ironflow.k8s import step_objects
from ironflow.k8s.sessions import clones
from ironflow.kube import api as kube
from ironflow.workspaces import git_script

__all__ = ["clone", "push"]


async def _with_grant(
    api: kube.KubeApi,
    s: AgentSandboxSettings,
    issuer: issuing.TokenIssuer | None,
    config: steps.AgentConfig,
    render: clones.Render,
    *,
    pod: str,
    run_id: str,
    step: str,
    expires_at: int,
) -> tuple[kube.ExecResult, str]:
    """Run ``render``'s exec with a fresh grant for the workspace's git host on its stdin,
    revoked on every path once the exec ends; the exec's result and the token (to mask it)."""
    secret = step_objects.workspace_secret(s.pod.settings, config)
    if secret is None or issuer is None or s.auth_proxy_url is None:
        raise errors.ConfigError("a git workspace needs the auth proxy (auth_proxy(url) and its admin key)")
    return await clones.exec_with_grant(
        api, render, issuer=issuer, secret=secret, proxy_url=s.auth_proxy_url,
        namespace=s.namespace, pod=pod, container=pod_manifests.CONTAINER_NAME, run_id=run_id, step=step,
        expires_at=expires_at,
    )  # fmt: skip


async def clone(
    api: kube.KubeApi,
    s: AgentSandboxSettings,
    issuer: issuing.TokenIssuer | None,
    config: steps.AgentConfig,
    *,
    pod: str,
    run_id: str,
    step: str,
    expires_at: int,
) -> str:
    """Clone the workspace into the claimed ``pod`` and return the starting commit.

    Raises:
        ConfigError: no auth proxy admin client to issue the grant with.
        WorkspaceUnsafe: the clone failed, or printed no starting commit.
        AuthProxyError: the grant could not be issued.
    """
    spec = config.workspace
    if spec is None:
        raise errors.ConfigError("a clone needs the step's git workspace")
    done, _ = await _with_grant(
        api, s, issuer, config, lambda proxy, size: workspace_execs.clone_exec(proxy, spec, size),
        pod=pod, run_id=run_id, step=step, expires_at=expires_at,
    )  # fmt: skip
    if done.exit_code != 0:
        # git's own words can quote the URL; only the exit code is said.
        raise errors.WorkspaceUnsafe(f"the workspace's clone failed in sandbox pod '{pod}' (exit {done.exit_code})")
    return workspace_execs.parse_commit(done.stdout)


async def push(
    api: kube.KubeApi,
    s: AgentSandboxSettings,
    issuer: issuing.TokenIssuer | None,
    config: steps.AgentConfig,
    changes: workspaces.WorkspaceChanges,
    *,
    pod: str,
    run_id: str,
    step: str,
    expires_at: int,
) -> workspaces.WorkspaceChanges:
    """``changes`` committed onto a fresh clone of the workspace's ref in the claimed ``pod`` and
    pushed to its ``push_branch``; unchanged when there is no branch or nothing changed.

    Raises:
        ConfigError: no auth proxy admin client to issue the grant with.
        WorkspaceRefused: the push failed (git's last words: e.g. the branch exists, or the ref
            moved and the patch no longer applies) or did not end within the step's timeout.
        AuthProxyError: the grant could not be issued.
    """
    spec = config.workspace
    branch = spec.push_branch if spec is not None else None
    if spec is None or branch is None or not changes.files:
        return changes
    message = workspaces.push_message(step, config.prompt)
    container = pod_manifests.CONTAINER_NAME
    timeout = s.step_timeout_s
    try:
        async with asyncio.timeout(timeout):
            argv = deliveries.write_file_command(workspace_execs.PUSH_PATCH_FILE, len(changes.patch))
            wrote = await api.exec(s.namespace, pod, argv, container=container, stdin=changes.patch)
            if wrote.exit_code != 0:
                raise errors.WorkspaceRefused(
                    f"could not write the patch to push into sandbox pod '{pod}': exit {wrote.exit_code}"
                )
            done, token = await _with_grant(
                api, s, issuer, config,
                lambda proxy, size: workspace_execs.push_exec(proxy, spec, size, message=message),
                pod=pod, run_id=run_id, step=f"{step} push", expires_at=expires_at,
            )  # fmt: skip
    except TimeoutError:
        raise errors.WorkspaceRefused(f"the git workspace push to '{branch}' did not end within {timeout:g}s") from None
    if done.exit_code != 0:
        said = done.stderr.decode(errors="replace")
        raise git_script.push_failure(spec.source, branch, said, token=token, silent=f"exit {done.exit_code}")
    return workspaces.WorkspaceChanges(changes.patch, changes.files, pushed_branch=branch)
