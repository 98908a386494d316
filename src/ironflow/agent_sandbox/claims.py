"""SandboxClaims over the API: wait for a condition, delete a selection and wait, reap expired ones.

The I/O helpers of :class:`~ironflow.agent_sandbox.claim_provider.AgentSandboxProvider`. Waiting uses
the shared informer of the namespace's claims (one watch however many steps wait), never a
poll. Decisions are pure (:func:`has_condition`, :func:`claim_reap_reason`, the k8s reaper's
``claim_expired``); the passes list, decide, delete and count, with the k8s reaper's delete
step and loop. A claim's deletion cascades to its Sandbox and pod through their
ownerReferences, so deleting claims is how a step or a run leaves nothing behind.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors, labels, steps
from ironflow.agent_sandbox import models
from ironflow.k8s import cleanup, pods, reaper
from ironflow.kube import api as kube
from ironflow.kube import informer, object_events, pod_problems

__all__ = [
    "CLAIM_NAME_PREFIX",
    "DEPENDENCY_GRACE_S",
    "ClaimReapReport",
    "Resources",
    "bound_sandbox",
    "claim_problem",
    "claim_reap_reason",
    "condition",
    "delete_claims_and_wait",
    "delete_quietly",
    "has_condition",
    "reap_claims",
    "resources",
    "run_claim_selectors",
    "sandbox_pod",
    "spawn_claim_reaper",
    "step_claim_selector",
    "wait_for",
    "wait_ready",
]

_log = logging.getLogger(__name__)

#: Step claims are named ``claude-claim-<unix ms hex>-<8 hex random>``.
CLAIM_NAME_PREFIX: Final = "claude-claim"


@dataclass(frozen=True)
class Resources:
    """The four resources of one API version."""

    sandboxes: kube.Resource
    templates: kube.Resource
    claims: kube.Resource
    pools: kube.Resource


def resources(version: models.ApiVersion | str = models.ApiVersion.V1BETA1) -> Resources:
    """Where the four kinds live in the API for ``version``."""
    v = str(version)
    core, ext = models.CORE_GROUP, models.EXTENSIONS_GROUP
    return Resources(
        kube.custom_resource(core, v, "sandboxes", kind="Sandbox"),
        kube.custom_resource(ext, v, "sandboxtemplates", kind="SandboxTemplate"),
        kube.custom_resource(ext, v, "sandboxclaims", kind="SandboxClaim"),
        kube.custom_resource(ext, v, "sandboxwarmpools", kind="SandboxWarmPool"),
    )


# --- pure decisions ----------------------------------------------------------------------


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The status condition of type ``kind``, or None."""
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def has_condition(obj: Mapping[str, Any], kind: str, status: str = "True") -> bool:
    """Whether condition ``kind`` has ``status`` (what ``kubectl wait --for=condition=kind`` checks).

    >>> has_condition({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "Ready")
    True
    """
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == status


#: Ready=False reasons of the agent-sandbox controllers (v1.0.x) that say the claim will not
#: become Ready, and whether a new claim (a retry) may: a configuration the controller refused
#: will not work again; a sandbox that ended or expired may.
_NEVER_READY: Final = {
    "TemplateNotFound": False,
    "WarmPoolNotFound": False,
    "InvalidMetadata": False,
    "EnvVarsInjectionRejected": False,
    "VolumeClaimTemplatesError": False,
    "ClaimExpired": True,
    "SandboxExpired": True,
    "PodFailed": True,
    "PodSucceeded": True,
    "MultiplePods": True,
}


#: Reasons the controller itself retries (v1.0.x requeues a claim whose pool or template is not in
#: its cache yet, and the pool's creation re-enqueues it): a claim made just after ``apply-template``
#: may show one for a moment, so it ends the wait only after :data:`DEPENDENCY_GRACE_S`.
_AWAITED: Final = frozenset({"TemplateNotFound", "WarmPoolNotFound"})
DEPENDENCY_GRACE_S: Final = 5.0
#: A wait whose whole time went to the grace still reads the claim's last word once.
_LAST_LOOK_S: Final = 0.05


def bound_sandbox(claim: Mapping[str, Any]) -> str | None:
    """The Sandbox the claim's controller bound it to (``status.sandbox.name``), or None yet."""
    name = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
    return str(name) if name else None


def claim_problem(claim: Mapping[str, Any]) -> pod_problems.Verdict | None:
    """Why ``claim`` will not become Ready, from its Ready condition, or None while it may.

    >>> claim_problem({"status": {"conditions": [{"type": "Ready", "status": "False",
    ...     "reason": "TemplateNotFound", "message": 'SandboxTemplate "t" not found'}]}}).retryable
    False
    """
    cond = condition(claim, "Ready") or {}
    reason = cond.get("reason")
    if cond.get("status") != "False" or reason not in _NEVER_READY:
        return None
    message = str(cond.get("message") or "the controller gave no message")
    awaited = reason in _AWAITED
    return pod_problems.Verdict(
        str(reason), message, retryable=_NEVER_READY[reason], grace=awaited, started=reason.startswith("Pod")
    )


def claim_reap_reason(claim: Mapping[str, Any], now: int) -> reaper.ReapReason | None:
    """``Expired`` when the claim's ``ironflow.io/expires-at`` has passed and it is not already going."""
    return reaper.ReapReason.EXPIRED if reaper.claim_expired(claim, now) else None


def run_claim_selectors(run_id: str) -> tuple[str, ...]:
    """The claims of a run and of runs whose root it is."""
    run = labels.sanitize_label_value(run_id)
    return (
        labels.selector(labels.SANDBOX_CLAIM_SELECTOR, {labels.LABEL_RUN_ID: run}),
        labels.selector(labels.SANDBOX_CLAIM_SELECTOR, {labels.LABEL_ROOT_RUN_ID: run}),
    )


def step_claim_selector(scope: steps.StepScope) -> str:
    """The claims of one step of one run: an earlier attempt's, labelled from the same scope."""
    scoped = scope.labels
    keys = (labels.LABEL_RUN_ID, labels.LABEL_STEP)
    return labels.selector(labels.SANDBOX_CLAIM_SELECTOR, {k: scoped[k] for k in keys})


# --- I/O ---------------------------------------------------------------------------------


async def wait_for(
    api: kube.KubeApi,
    resource: kube.Resource,
    namespace: str,
    name: str,
    condition_type: str = "Finished",
    *,
    timeout_s: float | None = None,
    status: str = "True",
) -> dict[str, Any]:
    """Like ``kubectl wait --for=condition=<type>``: the object once the condition holds.

    Raises:
        OperationTimeout: not met within ``timeout_s`` (the message names object and condition).
        KubeNotFound: the object was deleted first.
    """
    shared = informer.informer_for(api, namespace, resource)
    found = await shared.wait_for(name, lambda o: has_condition(o, condition_type, status), timeout_s)
    if found is None:
        raise errors.OperationTimeout(
            f"timed out after {timeout_s:g}s waiting for condition {condition_type}={status} on "
            f"{resource.plural}/{name} in {namespace}"
        )
    return found


async def wait_ready(
    api: kube.KubeApi, resource: kube.Resource, namespace: str, name: str, *, timeout_s: float
) -> dict[str, Any] | None:
    """The claim once Ready; None after ``timeout_s``; the :func:`claim_problem` error
    (``SandboxRefused`` / ``SandboxFailed``, with the claim's events) when its controller says
    it will not become Ready: at once, or after :data:`DEPENDENCY_GRACE_S` for a missing pool or
    template (the controller retries those itself)."""
    shared = informer.informer_for(api, namespace, resource)

    def settled(claim: Mapping[str, Any], *, patient: bool) -> bool:
        if has_condition(claim, "Ready"):
            return True
        problem = claim_problem(claim)
        return problem is not None and not (patient and problem.grace)

    grace = min(DEPENDENCY_GRACE_S, timeout_s)
    found = await shared.wait_for(name, functools.partial(settled, patient=True), grace)
    if found is None:
        left = max(timeout_s - grace, _LAST_LOOK_S)
        found = await shared.wait_for(name, functools.partial(settled, patient=False), left)
    verdict = None if found is None or has_condition(found, "Ready") else claim_problem(found)
    if verdict is not None:
        said = await object_events.describe_recent(api, namespace, resource.kind, name)
        raise verdict.error(f"SandboxClaim {name}", said)
    return found


async def delete_claims_and_wait(
    api: kube.KubeApi, resource: kube.Resource, namespace: str, selectors: tuple[str, ...], what: str, limit_s: float
) -> int:
    """Delete every claim matching ``selectors``, then wait until each (this uid) is gone.

    Raises:
        CleanupError: a listing or delete failed, or claims remain after ``limit_s``.
    """
    deleted = await cleanup.delete_matching(
        api, resource, namespace, selectors, what=what, noun="SandboxClaim", propagation_policy="Background"
    )
    await cleanup.wait_deleted(api, resource, namespace, deleted, limit_s, what=what, noun="SandboxClaim")
    if deleted:
        _log.info("deleted %d SandboxClaims of %s", len(deleted), what)
    return len(deleted)


async def sandbox_pod(api: kube.KubeApi, res: Resources, namespace: str, sandbox: str) -> str:
    """The pod of a Sandbox: its ``agents.x-k8s.io/pod-name`` annotation (an adopted warm pod), else its name."""
    try:
        obj = await api.get(res.sandboxes, namespace, sandbox)
    except errors.KubeNotFound:
        return sandbox
    annotations = obj.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(labels.ANNOTATION_SANDBOX_POD_NAME) or sandbox)


async def delete_quietly(api: kube.KubeApi, resource: kube.Resource, namespace: str, name: str) -> bool:
    """Delete one claim (cascading in the background), never raising; runs to the end under cancellation."""
    return await pods.delete_quietly(api, resource, namespace, name, background=True)


@dataclass(frozen=True)
class ClaimReapReport:
    """What one reaping pass deleted (or would, in a dry run)."""

    claims: tuple[str, ...] = ()
    dry_run: bool = False

    @property
    def total(self) -> int:
        return len(self.claims)


async def reap_claims(
    api: kube.KubeApi, resource: kube.Resource, namespace: str, *, now: int | None = None, dry_run: bool = False
) -> ClaimReapReport:
    """Delete ironflow's claims whose ``ironflow.io/expires-at`` has passed (a crashed worker's).

    Raises:
        CleanupError: the claims cannot be listed. A failed delete is logged; the next pass retries.
    """
    clock = int(time.time()) if now is None else now
    try:
        listed = (await api.list_all(resource, namespace, label_selector=labels.SANDBOX_CLAIM_SELECTOR)).items
    except errors.KubernetesError as exc:
        raise errors.CleanupError(f"failed to list SandboxClaims in {namespace}: {exc}") from exc
    chosen = sorted((c for c in listed if claim_reap_reason(c, clock)), key=lambda c: str(c["metadata"]["name"]))
    if dry_run:
        return ClaimReapReport(tuple(str(c["metadata"]["name"]) for c in chosen), dry_run=True)
    done = await reaper.delete_each(api, resource, namespace, chosen, background=True, what="SandboxClaim")
    if done:
        _log.info("reaped %d expired SandboxClaims in %s", len(done), namespace)
    return ClaimReapReport(tuple(done))


def spawn_claim_reaper(
    api: Callable[[], Awaitable[kube.KubeApi]], resource: kube.Resource, namespace: str, interval_s: float
) -> reaper.OrphanReaper:
    """Reap expired claims now and every ``interval_s`` on the k8s reaper's loop (a failing pass is logged).

    ``api`` connects (called before each pass, so an API that is down at start-up is retried).
    """

    async def reap(client: kube.KubeApi, ns: str) -> ClaimReapReport:
        return await reap_claims(client, resource, ns)

    return reaper.spawn_orphan_reaper(api, namespace, interval_s, reap=reap, kind="claim")
