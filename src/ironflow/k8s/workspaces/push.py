"""Push a pod step's git workspace patch to a new branch from a pod of its own (I/O).

:func:`push` issues the push's own grant (the workspace's git host only), creates the patch
ConfigMap and the push pod :mod:`ironflow.k8s.workspaces.push_pod` renders, waits for the pod
(:func:`ironflow.k8s.commands.execution.run_pod`, which deletes it on every path), then deletes the
ConfigMap and revokes the grant, on every path too. Nothing changed: nothing is pushed.
"""

from __future__ import annotations

import secrets as _random
from collections.abc import Mapping

from ironflow.auth_proxy import issuing, revoking, tokens
from ironflow.k8s import pods
from ironflow.k8s.commands import execution
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import push_pod
from ironflow.kube import api as kube
from ironflow.workspaces import Workspace, WorkspaceChanges, git_script

__all__ = ["push"]


async def push(
    api: kube.KubeApi,
    settings: ProviderSettings,
    spec: Workspace,
    changes: WorkspaceChanges,
    *,
    issuer: issuing.TokenIssuer,
    secret: tokens.SecretCredential,
    run_id: str,
    step: str,
    now: int,
    message: str,
    pod_labels: Mapping[str, str],
) -> WorkspaceChanges:
    """``changes`` committed onto a fresh clone of ``spec``'s ref and pushed to ``spec.push_branch``.

    Raises:
        WorkspaceRefused: the patch is too large for a pod, or the push failed (git's last
            words: e.g. the branch exists, or the ref moved and the patch no longer applies).
    """
    branch = spec.push_branch
    if branch is None or not changes.files:
        return changes
    expires_at = now + int(settings.timeout_s) + 60
    async with revoking.held(issuer) as held:
        _, token = await held.secret_token(secret, run_id, f"{step} push", expires_at)
        configmap, pod = push_pod.push_objects(
            settings, spec, changes, token=token.reveal(), message=message, pod_labels=pod_labels,
            now=now, rand32=_random.randbits(32),
        )  # fmt: skip
        name = configmap["metadata"]["name"]
        await api.create(kube.CONFIGMAPS, settings.namespace, configmap)
        try:
            done = await execution.run_pod(
                api, pod, timeout_s=settings.timeout_s, image_pull_grace_s=settings.image_pull_grace_s
            )
        finally:
            await pods.delete_quietly(api, kube.CONFIGMAPS, settings.namespace, name)
    if not done.success:
        raise git_script.push_failure(
            spec.source, branch, done.logs, token=token.reveal(), silent=f"phase {done.phase}"
        )
    return WorkspaceChanges(changes.patch, changes.files, pushed_branch=branch)
