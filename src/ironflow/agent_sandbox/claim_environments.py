"""A step's own environment on agent-sandbox: create its PVC, or find and refresh it to resume (I/O).

The rendering and the reasons are :mod:`~ironflow.agent_sandbox.sandbox_environments`; this
module reads the template (the PVC's owner), creates a new environment's PVC, or checks a
resumed one is ironflow's and alive and moves its expiry on. The claim that mounts it is the
step runner's to create (named after the id).
"""

from __future__ import annotations

import secrets as _random
from typing import Final

from ironflow import errors, steps
from ironflow.agent_sandbox import claims, sandbox_environments
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.k8s import environments
from ironflow.k8s import step_manifests as pod_manifests
from ironflow.kube import api as kube

__all__ = ["prepare"]

_PVCS: Final = kube.PERSISTENTVOLUMECLAIMS


async def prepare(
    api: kube.KubeApi, s: sandbox_steps.AgentSandboxSettings, config: steps.AgentConfig, *, now: int
) -> str | None:
    """The environment id the step's claim takes, its PVC ready: a new one, or the resumed one
    with its expiry refreshed; None when the step has no environment of its own.

    Raises:
        StepConfigError: the resumed environment is missing, expired, being deleted or not ironflow's.
        KubeNotFound: the template (the PVC's owner) does not exist: run ``apply-template``.
    """
    volume = s.pod.settings.environment
    if not s.own_environments or volume is None:
        return None
    lifetime = pod_manifests.lifetime_seconds(s.pod.settings) + int(s.ready_timeout_s)
    expires = environments.environment_expires_at(volume, now=now, lifetime_s=lifetime)
    resume = config.resume_environment_id
    if resume is not None:
        sandbox_environments.check_id(resume)
        name = sandbox_environments.pvc_name(resume)
        gone = errors.StepConfigError(environments.not_found_message(resume))
        try:
            found = await api.get(_PVCS, s.namespace, name)
        except errors.KubeNotFound:
            raise gone from None
        if not environments.is_live_environment_claim(found):
            raise gone
        await api.patch(_PVCS, s.namespace, name, environments.environment_expiry_patch(expires))
        return resume
    environment_id = environments.generate_environment_name(now * 1000, _random.randbits(32))
    try:
        template = await api.get(claims.resources(s.api_version).templates, s.namespace, s.template)
    except errors.KubeNotFound as exc:
        raise errors.KubeNotFound(
            f"SandboxTemplate {s.namespace}/{s.template} does not exist: run 'ironflow sandbox apply-template'",
            status=404,
        ) from exc
    scope = config.scope.labels if config.scope is not None else {}
    pvc = sandbox_environments.environment_pvc(
        environment_id, namespace=s.namespace, volume=volume, template=template, pod_labels=scope, expires_at=expires
    )
    await api.create(_PVCS, s.namespace, pvc)
    return environment_id
