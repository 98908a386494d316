"""The short pod that pushes a git workspace's patch to a new branch, and its patch ConfigMap (pure).

The step's pod is gone, and its ``.git`` was the step's to rig (hooks, an ``insteadOf``), so
the push never runs there: a second pod, placed and hardened as an ``exec`` pod
(:func:`ironflow.k8s.commands.pod_runs.exec_pod_run`), clones the workspace's ref afresh through the
auth proxy's relay with a grant of its own, applies the patch to the index only, commits as
``ironflow`` with hooks off (:func:`ironflow.workspaces.git_script.push_script`), and pushes to the new
branch with ``--force-with-lease=<ref>:``, so a branch that exists is never moved
(:func:`ironflow.workspaces.git_script.push_commands`). The patch reaches it as a ConfigMap
(``binaryData``), labelled as step data so ``release_run`` and the reaper find it.

Never does I/O.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors, labels
from ironflow.k8s import step_manifests
from ironflow.k8s.commands import pod_runs
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import init_pods
from ironflow.workspaces import WORKSPACE_PATH, Workspace, WorkspaceChanges, git_script

__all__ = ["PUSH_PATCH_LIMIT", "PUSH_POD_PREFIX", "push_objects"]

PUSH_POD_PREFIX: Final = "ironflow-push"
#: The largest patch a push pod takes: a ConfigMap holds at most 1 MiB, base64 included.
PUSH_PATCH_LIMIT: Final = 700 * 1024
_PATCH_DIR: Final = "/ironflow/patch"
_PATCH_KEY: Final = "patch"
_PATCH_VOLUME: Final = "ironflow-patch"
_WORK_VOLUME: Final = "ironflow-workspace"


def push_objects(
    settings: ProviderSettings,
    spec: Workspace,
    changes: WorkspaceChanges,
    *,
    token: str,
    message: str,
    pod_labels: Mapping[str, str],
    now: int,
    rand32: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The patch ConfigMap and the push pod for ``spec.push_branch``; ``token`` is the push's own grant.

    Raises:
        StepConfigError: no auth proxy or no branch to push to.
        WorkspaceRefused: the patch is over :data:`PUSH_PATCH_LIMIT`.
    """
    proxy, branch = settings.auth_proxy_url, spec.push_branch
    if proxy is None or branch is None:
        raise errors.StepConfigError("a push needs auth_proxy(url) and the workspace's push_branch")
    if len(changes.patch) > PUSH_PATCH_LIMIT:
        raise errors.WorkspaceRefused(
            f"the patch is {len(changes.patch)} bytes: a pod pushes at most {PUSH_PATCH_LIMIT}; "
            "take it with --patch and push it yourself"
        )
    clone = git_script.clone_commands(proxy, spec.source, token, directory=WORKSPACE_PATH, ref=spec.ref)
    push = git_script.push_commands(proxy, spec.source, token, directory=WORKSPACE_PATH, branch=branch)
    # The placement and hardening of an exec pod; the name and the command are the push's.
    run = pod_runs.exec_pod_run(settings, ["true"], timeout_s=settings.timeout_s, now_ms=now * 1000, rand32=rand32)
    name = step_manifests.generate_pod_name(now * 1000, rand32, PUSH_POD_PREFIX)
    script = git_script.push_script(clone, push, directory=WORKSPACE_PATH, patch_file=f"{_PATCH_DIR}/{_PATCH_KEY}")
    run = dataclasses.replace(run, name=name, command=script).labels(dict(pod_labels))
    env = (*clone.env.items(), *git_script.COMMITTER.items(), (git_script.PUSH_MESSAGE_ENV, message))
    for name, value in env:
        run = run.env(name, value)
    pod = init_pods.as_proxy_client(run.build_pod(now=now))
    configmap_name = f"{run.name}-patch"
    container = pod["spec"]["containers"][0]
    container["volumeMounts"] = [
        {"name": _WORK_VOLUME, "mountPath": WORKSPACE_PATH},
        {"name": _PATCH_VOLUME, "mountPath": _PATCH_DIR, "readOnly": True},
    ]
    pod["spec"]["volumes"] = [
        {"name": _WORK_VOLUME, "emptyDir": {}},
        {"name": _PATCH_VOLUME, "configMap": {"name": configmap_name}},
    ]
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name,
            "namespace": settings.namespace,
            "labels": {
                **{k: v for k, v in pod_labels.items() if k in (labels.LABEL_RUN_ID, labels.LABEL_STEP,
                                                               labels.LABEL_ROOT_RUN_ID)},
                labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
                labels.LABEL_COMPONENT: labels.COMPONENT_PROMPT_DATA,
            },
            "annotations": dict(pod["metadata"]["annotations"]),
        },
        "binaryData": {_PATCH_KEY: base64.b64encode(changes.patch).decode()},
    }  # fmt: skip
    return configmap, pod
