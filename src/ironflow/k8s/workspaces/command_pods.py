"""``exec --backend k8s`` in a workspace: the command's pod cloned (or its PVC mounted), run, its patch read back (I/O).

The ``PodRun`` of :func:`ironflow.k8s.commands.pod_runs.exec_pod_run` renders the pod; this module
issues the clone's proxy grant (the workspace's git host only), turns the pod into a
workspace pod (:func:`ironflow.k8s.workspaces.init_pods.add_git_workspace`), runs it with
:func:`ironflow.k8s.commands.execution.run_pod` and splits the report off its log
(:func:`ironflow.workspaces.frames.split_frame`). The grant is revoked on every path.
"""

from __future__ import annotations

import dataclasses
import math
import time

from ironflow import errors, workspaces
from ironflow.auth_proxy import admin_client, issuing, revoking
from ironflow.k8s import step_objects
from ironflow.k8s.commands import execution
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import init_pods
from ironflow.k8s.workspaces import push as workspace_push
from ironflow.kube import api as kube
from ironflow.steps import AgentConfig
from ironflow.workspaces import WORKSPACE_PATH, Workspace, WorkspaceChanges, frames, git_script

__all__ = ["check", "run_in_workspace"]


def check(settings: ProviderSettings, spec: Workspace) -> None:
    """What a pod's workspace needs, before anything is made: a git URL, an auth proxy and a
    credential for the host.

    Raises:
        StepConfigError, WorkspaceRefused: the workspace cannot run on this provider.
    """
    step_objects.check_workspace(settings, AgentConfig("exec", workspace=spec))


async def run_in_workspace(
    api: kube.KubeApi,
    settings: ProviderSettings,
    run: PodRun,
    spec: Workspace,
    *,
    now: int,
    issuer: issuing.TokenIssuer | None = None,
) -> tuple[execution.PodRunOutput, WorkspaceChanges | None]:
    """Run ``run``'s command on a clone of ``spec`` and return its output (the report taken
    off) and its changes; a failed command whose report is missing returns None for them.
    A succeeded command's changes are pushed to ``spec.push_branch``, when it is set.

    ``issuer`` defaults to an admin client of the provider's auth proxy (closed here).

    Raises:
        StepConfigError, WorkspaceRefused: as :func:`check`.
        WorkspaceUnsafe: the command succeeded, but its report is missing, cut or refused.
        AuthProxyError: the grant could not be issued.
    """
    check(settings, spec)
    if spec.is_pvc:
        body = init_pods.add_pvc_workspace(run.build_pod(now=now), spec)
        done = await execution.run_pod(
            api,
            body,
            timeout_s=run.settings.timeout_s,
            image_pull_grace_s=run.settings.image_pull_grace_s,
            stdin=run.stdin_feed(),
        )
        return _split(done)
    proxy = settings.auth_proxy_url
    assert proxy is not None  # check() refuses a provider without one
    secret = step_objects.workspace_secret(settings, AgentConfig("exec", workspace=spec))
    assert secret is not None
    expires_at = now + math.ceil(run.settings.timeout_s + run.settings.expiry_margin_s)
    async with admin_client.issuer_for(issuer, proxy, settings.auth_proxy_admin_key) as grants:
        async with revoking.held(grants) as held:
            _, token = await held.secret_token(secret, run.name, "exec", expires_at)
            invocation = git_script.clone_commands(
                proxy, spec.source, token.reveal(), directory=WORKSPACE_PATH, ref=spec.ref
            )
            body = init_pods.add_git_workspace(run.build_pod(now=now), spec, invocation)
            done = await execution.run_pod(
                api,
                body,
                timeout_s=run.settings.timeout_s,
                image_pull_grace_s=run.settings.image_pull_grace_s,
                stdin=run.stdin_feed(),
            )
        done, changes = _split(done)
        if done.success and spec.push_branch is not None and changes is not None:
            message = workspaces.push_message("exec", run.command)
            changes = await workspace_push.push(
                api, settings, spec, changes, issuer=grants, secret=secret, run_id=run.name, step="exec",
                now=int(time.time()), message=message, pod_labels=run.settings.labels,
            )  # fmt: skip
        return done, changes


def _split(done: execution.PodRunOutput) -> tuple[execution.PodRunOutput, WorkspaceChanges | None]:
    """The command's own output and its changes; a failed command's missing report is no change set."""
    try:
        said, changes = frames.split_frame(done.logs)
    except errors.WorkspaceUnsafe:
        if done.success:
            raise
        return done, None
    return dataclasses.replace(done, logs=said), changes
