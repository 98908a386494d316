"""A sandbox's life after it started: suspend and resume, wait on a condition, a pool's status (I/O).

What ``ironflow sandbox suspend|resume|wait|pools`` and the sessions' ``suspend``/``resume``
do, v1beta1 (agent-sandbox 1.0) only. Suspending sets ``spec.operatingMode: Suspended``: the
controller deletes the pod and keeps the Sandbox, its PVCs and its claim; ``Running`` makes a
new pod on the same PVCs. A name is a SandboxClaim's when a claim of that name exists (a
session's id is its claim's name; an adopted warm Sandbox has the pool's generated name, not
the claim's), else a Sandbox's. Waiting uses the shared informer of the namespace's
Sandboxes (:func:`~ironflow.agent_sandbox.claims.wait_for`), never a poll.

The decisions are pure (:func:`mode_patch`, :func:`pool_statuses`); the rest reads or patches
through :mod:`ironflow.kube.api`.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, models
from ironflow.kube import api as kube

__all__ = [
    "ADOPTION_WINDOW_S",
    "PoolStatus",
    "Target",
    "epoch",
    "mode_patch",
    "pool_status",
    "pool_statuses",
    "resolve",
    "set_mode",
    "wait_condition",
]

#: ``adopted`` counts the claims of the last hour.
ADOPTION_WINDOW_S: Final = 3600
_RES: Final = claims.resources(models.ApiVersion.V1BETA1)


@dataclass(frozen=True)
class Target:
    """The Sandbox a name stands for, and the claim it came through (None: a raw Sandbox)."""

    sandbox: str
    claim: str | None = None

    def describe(self) -> str:
        """``sandbox/NAME`` (``(claim CLAIM)`` when reached through one), for messages."""
        return f"sandbox/{self.sandbox}" + (f" (claim {self.claim})" if self.claim else "")


@dataclass(frozen=True)
class PoolStatus:
    """One SandboxWarmPool's readout: what it should hold, what is ready, how many claims adopted a member."""

    name: str
    namespace: str
    template: str
    desired: int
    replicas: int
    ready: int
    adopted_last_hour: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "template": self.template,
            "desired": self.desired,
            "replicas": self.replicas,
            "ready": self.ready,
            "adoptedLastHour": self.adopted_last_hour,
        }


# --- pure --------------------------------------------------------------------------------


def mode_patch(mode: models.OperatingMode) -> dict[str, Any]:
    """The merge patch that sets a v1beta1 Sandbox's operating mode (pure).

    >>> mode_patch(models.OperatingMode.SUSPENDED)
    {'spec': {'operatingMode': 'Suspended'}}
    """
    return {"spec": {"operatingMode": str(mode)}}


def epoch(timestamp: str | None) -> float | None:
    """An RFC 3339 ``...Z`` timestamp as epoch seconds; None when absent or unreadable."""
    if not timestamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def pool_statuses(
    pools: Iterable[Mapping[str, Any]],
    claim_list: Iterable[Mapping[str, Any]],
    sandboxes: Iterable[Mapping[str, Any]],
    *,
    now: float,
) -> list[PoolStatus]:
    """The status of each pool, from the namespace's pools, claims and Sandboxes (pure).

    ``desired`` is ``spec.replicas`` (the scale subresource's), ``replicas`` and ``ready`` the
    controller's ``status``. ``adopted_last_hour`` counts the claims on the pool created within
    :data:`ADOPTION_WINDOW_S` of ``now`` that are bound to a Sandbox the controller started warm
    (label ``launch-type: warm``) and that the claim now controls: an adoption, not a cold start
    on the pool's template. A claim already deleted is not seen, so the count is a lower bound.
    """
    by_name = {str(s["metadata"]["name"]): s for s in sandboxes}
    adopted: dict[str, int] = {}
    for claim in claim_list:
        meta = claim.get("metadata") or {}
        pool = ((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name")
        created = epoch(meta.get("creationTimestamp"))
        bound = claims.bound_sandbox(claim)
        if not pool or bound is None or created is None or now - created > ADOPTION_WINDOW_S:
            continue
        sandbox = by_name.get(bound) or {}
        smeta = sandbox.get("metadata") or {}
        owners = [o for o in smeta.get("ownerReferences") or () if o.get("controller")]
        owned = any(o.get("kind") == "SandboxClaim" and o.get("uid") == meta.get("uid") for o in owners)
        if (smeta.get("labels") or {}).get(labels.LABEL_SANDBOX_LAUNCH_TYPE) == "warm" and owned:
            adopted[pool] = adopted.get(pool, 0) + 1
    out = []
    for p in pools:
        meta, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
        name = str(meta["name"])
        out.append(
            PoolStatus(
                name=name,
                namespace=str(meta.get("namespace", "")),
                template=str((spec.get("sandboxTemplateRef") or {}).get("name", "")),
                desired=int(spec.get("replicas", 0)),
                replicas=int(status.get("replicas", 0)),
                ready=int(status.get("readyReplicas", 0)),
                adopted_last_hour=adopted.get(name, 0),
            )
        )
    return sorted(out, key=lambda s: s.name)


# --- I/O ---------------------------------------------------------------------------------


async def resolve(api: kube.KubeApi, namespace: str, name: str) -> Target:
    """The Sandbox ``name`` stands for: a claim's bound Sandbox, else the Sandbox of that name.

    Raises:
        KubeNotFound: neither a claim nor a Sandbox has that name, or the claim is not bound yet.
    """
    try:
        claim = await api.get(_RES.claims, namespace, name)
    except errors.KubeNotFound:
        await api.get(_RES.sandboxes, namespace, name)  # KubeNotFound names what was looked for
        return Target(name)
    bound = claims.bound_sandbox(claim)
    if bound is None:
        raise errors.KubeNotFound(f"SandboxClaim {namespace}/{name} is not bound to a Sandbox yet")
    return Target(bound, name)


async def set_mode(
    api: kube.KubeApi, namespace: str, name: str, mode: models.OperatingMode, *, timeout_s: float | None
) -> Target:
    """Suspend or resume what ``name`` stands for; with ``timeout_s``, wait until the controller did it
    (``Suspended=True``: the pod is gone; ``Ready=True``: a new pod runs on the kept PVCs).

    Raises:
        KubeNotFound: see :func:`resolve`. OperationTimeout: not done within ``timeout_s``.
    """
    target = await resolve(api, namespace, name)
    await api.patch(_RES.sandboxes, namespace, target.sandbox, mode_patch(mode))
    if timeout_s is not None:
        wanted = "Suspended" if mode is models.OperatingMode.SUSPENDED else "Ready"
        await claims.wait_for(api, _RES.sandboxes, namespace, target.sandbox, wanted, timeout_s=timeout_s)
    return target


async def wait_condition(
    api: kube.KubeApi, namespace: str, name: str, condition: str, *, status: str = "True", timeout_s: float
) -> dict[str, Any]:
    """The raw Sandbox ``name`` once ``condition`` has ``status``, as ``kubectl wait`` does: a
    missing Sandbox fails at once (one GET), then the shared informer's watch decides.

    Raises:
        KubeNotFound: no such Sandbox, or it was deleted while waited on. OperationTimeout.
    """
    await api.get(_RES.sandboxes, namespace, name)
    return await claims.wait_for(api, _RES.sandboxes, namespace, name, condition, timeout_s=timeout_s, status=status)


async def pool_status(api: kube.KubeApi, namespace: str, *, now: float | None = None) -> list[PoolStatus]:
    """:func:`pool_statuses` of a namespace: three lists (pools, claims, Sandboxes)."""
    pools = (await api.list_all(_RES.pools, namespace)).items
    if not pools:
        return []
    listed = (await api.list_all(_RES.claims, namespace)).items
    sandboxes = (await api.list_all(_RES.sandboxes, namespace)).items
    return pool_statuses(pools, listed, sandboxes, now=time.time() if now is None else now)
