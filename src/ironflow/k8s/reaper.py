"""The orphan reaper: delete what a crashed worker left behind, once its expiry has passed.

Decisions are pure (``reap_reason(pod, now)`` and friends take the raw object and the
clock and return an answer); ``reap_namespace`` lists, decides, deletes and counts;
``delete_each`` is its delete step and ``spawn_orphan_reaper`` its loop, both also serving
the agent-sandbox claim reaper.
Order of passes: Jobs (a live Job would recreate its pods), pods, prompt ConfigMaps,
environment and session HOME claims. An object without a parseable ``ironflow.io/expires-at`` annotation
is never deleted for expiry; a pod a Job controls is left to its Job; a pod already
terminating is not deleted twice.

403 on Jobs or claims skips that pass with a warning (the worker's Role may lack those
verbs); any other listing error fails the whole pass. A failed delete is logged and not
counted: the next pass tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from ironflow import errors, labels
from ironflow.kube import api as kube

__all__ = [
    "DELETE_CONCURRENCY",
    "PAGE_SIZE",
    "SWEPT",
    "OrphanReaper",
    "ReapReason",
    "ReapReport",
    "SweepReport",
    "claim_expired",
    "configmap_expired",
    "delete_each",
    "job_reap_reason",
    "reap_namespace",
    "reap_orphans",
    "reap_reason",
    "spawn_orphan_reaper",
    "sweep_earlier_life",
]

_log = logging.getLogger(__name__)

#: Page size for every listing of a pass: a namespace with 100k pods is read in pieces.
PAGE_SIZE: Final = 500
#: Deletes in flight at once: a pass after an outage must not flood the API server.
DELETE_CONCURRENCY: Final = 16


class ReapReason(StrEnum):
    """Why an object is deleted."""

    DEADLINE_EXCEEDED = "DeadlineExceeded"
    EXPIRED = "Expired"


# --- pure decisions ----------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name", ""))


def _expiry(obj: Mapping[str, Any]) -> int | None:
    annotations = _meta(obj).get("annotations")
    return labels.expires_at(annotations if isinstance(annotations, Mapping) else None)


def _expired(obj: Mapping[str, Any], now: int) -> bool:
    expiry = _expiry(obj)
    return expiry is not None and expiry < now


def _deleting(obj: Mapping[str, Any]) -> bool:
    return _meta(obj).get("deletionTimestamp") is not None


def _controlled_by_job(obj: Mapping[str, Any]) -> bool:
    refs = _meta(obj).get("ownerReferences") or ()
    return any(isinstance(r, Mapping) and r.get("kind") == "Job" and r.get("controller") is True for r in refs)


def reap_reason(pod: Mapping[str, Any], now: int) -> ReapReason | None:
    """Why this pod should be deleted now, or None to keep it.

    Terminating pods and pods of a Job are never chosen; a pod the kubelet killed for
    its deadline goes whatever its annotation; otherwise the expiry decides, whatever
    the phase (a pod on a lost node reports ``Unknown`` forever).
    """
    if _deleting(pod) or _controlled_by_job(pod):
        return None
    status = pod.get("status") or {}
    if status.get("phase") == "Failed" and status.get("reason") == "DeadlineExceeded":
        return ReapReason.DEADLINE_EXCEEDED
    if _expired(pod, now):
        return ReapReason.EXPIRED
    return None


def job_reap_reason(job: Mapping[str, Any], now: int) -> ReapReason | None:
    """A Job failed for its deadline goes at once; any other Job waits for its expiry."""
    for cond in (job.get("status") or {}).get("conditions") or ():
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "Failed"
            and cond.get("status") == "True"
            and cond.get("reason") == "DeadlineExceeded"
        ):
            return ReapReason.DEADLINE_EXCEEDED
    if _expired(job, now):
        return ReapReason.EXPIRED
    return None


def configmap_expired(cm: Mapping[str, Any], now: int) -> bool:
    """A prompt ConfigMap goes once its (strictly past) expiry has passed."""
    return _expired(cm, now)


def claim_expired(pvc: Mapping[str, Any], now: int) -> bool:
    """A claim (an environment, a session's HOME) goes once expired, unless it is already being deleted."""
    return not _deleting(pvc) and _expired(pvc, now)


# --- the pass ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReapReport:
    """What one pass deleted (or, in a dry run, would delete), and the names."""

    pods_deleted: int = 0
    jobs_deleted: int = 0
    configmaps_deleted: int = 0
    pvcs_deleted: int = 0
    dry_run: bool = False
    pods: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    configmaps: tuple[str, ...] = ()
    pvcs: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return self.pods_deleted + self.jobs_deleted + self.configmaps_deleted + self.pvcs_deleted

    def to_dict(self) -> dict[str, Any]:
        return {
            "pods_deleted": self.pods_deleted,
            "jobs_deleted": self.jobs_deleted,
            "configmaps_deleted": self.configmaps_deleted,
            "pvcs_deleted": self.pvcs_deleted,
            "dry_run": self.dry_run,
            "pods": list(self.pods),
            "jobs": list(self.jobs),
            "configmaps": list(self.configmaps),
            "pvcs": list(self.pvcs),
            "warnings": list(self.warnings),
        }


_JOBS_FORBIDDEN: Final = "cannot list Jobs: orphan JobRun Jobs are not reaped; grant list and delete on jobs"
_CLAIMS_FORBIDDEN: Final = (
    "cannot list ironflow's claims (environments, sessions' HOME): expired claims are not reaped; "
    "grant list and delete on persistentvolumeclaims"
)
#: The claims ironflow makes that carry an expiry: a step's environment, a session's HOME (its pod's own
#: reference takes it with the pod; the expiry covers one left without a pod).
_EXPIRING_CLAIMS: Final = frozenset({labels.COMPONENT_ENVIRONMENT, labels.COMPONENT_SESSION_HOME})


async def _list_all(
    api: kube.KubeApi, resource: kube.Resource, namespace: str, label_selector: str
) -> list[dict[str, Any]]:
    return (await api.list_all(resource, namespace, label_selector=label_selector, page_size=PAGE_SIZE)).items


async def _delete(
    api: kube.KubeApi, resource: kube.Resource, namespace: str, obj: Mapping[str, Any], *, background: bool, what: str
) -> bool:
    name, uid = _name(obj), _meta(obj).get("uid")
    try:
        await api.delete(
            resource,
            namespace,
            name,
            propagation_policy="Background" if background else None,
            uid=str(uid) if uid else None,
        )
    except errors.KubeNotFound:
        return False  # gone already: someone else reaped it
    except errors.KubeConflict:
        _log.debug("not reaping %s '%s': deleted and made again since it was listed", what, name)
        return False  # the name is a new object's (a resumed session's pod), not the one judged
    except errors.KubernetesError as exc:
        _log.warning("failed to reap %s '%s': %s", what, name, exc)
        return False
    return True


async def delete_each(
    api: kube.KubeApi,
    resource: kube.Resource,
    namespace: str,
    listed: Sequence[Mapping[str, Any]],
    *,
    background: bool,
    what: str,
) -> list[str]:
    """Delete each listed object, at most ``DELETE_CONCURRENCY`` at once; the names deleted, in order.

    Each delete is of the object listed (its UID a precondition), never of one made again under its
    name since. Never raises for one object: one already gone or replaced is left out, a failed
    delete is logged (naming ``what``) and left out for the next pass to retry.
    """
    gate = asyncio.Semaphore(DELETE_CONCURRENCY)

    async def one(obj: Mapping[str, Any]) -> bool:
        async with gate:
            return await _delete(api, resource, namespace, obj, background=background, what=what)

    done = await asyncio.gather(*(one(o) for o in listed))
    return [_name(o) for o, ok in zip(listed, done, strict=True) if ok]


async def reap_namespace(
    api: kube.KubeApi, namespace: str, *, now: int | None = None, dry_run: bool = False
) -> ReapReport:
    """One pass over ``namespace``: Jobs, pods, prompt ConfigMaps, environment claims and sessions' HOME claims.

    Raises :class:`~ironflow.errors.CleanupError` when pods, ConfigMaps, or (other than
    with 403) Jobs or claims cannot be listed.
    """
    clock = int(time.time()) if now is None else now
    warnings: list[str] = []

    async def listing(
        resource: kube.Resource, selector: str, failure: str, forbidden: str | None
    ) -> list[dict[str, Any]]:
        try:
            return await _list_all(api, resource, namespace, selector)
        except errors.KubeForbidden as exc:
            if forbidden is None:
                raise errors.CleanupError(f"{failure}: {exc}") from exc
            _log.warning("%s", forbidden)
            warnings.append(forbidden)
            return []
        except errors.KubernetesError as exc:
            raise errors.CleanupError(f"{failure}: {exc}") from exc

    async def apply(resource: kube.Resource, chosen: list[dict[str, Any]], *, background: bool, what: str) -> list[str]:
        if dry_run:
            return [_name(o) for o in chosen]
        return await delete_each(api, resource, namespace, chosen, background=background, what=what)

    jobs = await listing(kube.JOBS, labels.MANAGED_SELECTOR, "failed to list ironflow Jobs", _JOBS_FORBIDDEN)
    jobs_done = await apply(kube.JOBS, [j for j in jobs if job_reap_reason(j, clock)], background=True, what="Job")
    pods = await listing(kube.PODS, labels.MANAGED_SELECTOR, "failed to list ironflow pods", None)
    pods_done = await apply(kube.PODS, [p for p in pods if reap_reason(p, clock)], background=False, what="pod")
    cms = await listing(kube.CONFIGMAPS, labels.PROMPT_SELECTOR, "failed to list prompt ConfigMaps", None)
    cms_done = await apply(
        kube.CONFIGMAPS,
        sorted((c for c in cms if configmap_expired(c, clock)), key=_name),
        background=False,
        what="ConfigMap",
    )
    pvcs = await listing(
        kube.PERSISTENTVOLUMECLAIMS, labels.MANAGED_SELECTOR, "failed to list claims", _CLAIMS_FORBIDDEN
    )
    pvcs = [c for c in pvcs if (_meta(c).get("labels") or {}).get(labels.LABEL_COMPONENT) in _EXPIRING_CLAIMS]
    pvcs_done = await apply(
        kube.PERSISTENTVOLUMECLAIMS,
        [c for c in pvcs if claim_expired(c, clock)],
        background=False,
        what="claim",
    )
    report = ReapReport(
        pods_deleted=len(pods_done),
        jobs_deleted=len(jobs_done),
        configmaps_deleted=len(cms_done),
        pvcs_deleted=len(pvcs_done),
        dry_run=dry_run,
        pods=tuple(pods_done),
        jobs=tuple(jobs_done),
        configmaps=tuple(cms_done),
        pvcs=tuple(pvcs_done),
        warnings=tuple(warnings),
    )
    if report.total and not dry_run:
        _log.info(
            "reaped orphans in %s: %d pods, %d Jobs, %d ConfigMaps, %d claims",
            namespace,
            report.pods_deleted,
            report.jobs_deleted,
            report.configmaps_deleted,
            report.pvcs_deleted,
        )
    return report


async def reap_orphans(cluster: kube.ClusterConfig, namespace: str, *, dry_run: bool = False) -> ReapReport:
    """One pass without a provider, e.g. in a worker that only runs ``PodRun``."""
    async with await kube.KubeApi.connect(cluster) as api:
        return await reap_namespace(api, namespace, dry_run=dry_run)


class OrphanReaper:
    """A background reaping loop; ``await handle.stop()`` ends it.

    The first pass runs at once, then one every ``interval``; a failing pass is logged
    and the loop goes on.
    """

    def __init__(self, task: asyncio.Task[None]) -> None:
        self._task = task

    @property
    def running(self) -> bool:
        return not self._task.done()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def spawn_orphan_reaper(
    api: kube.KubeApi | Callable[[], Awaitable[kube.KubeApi]],
    namespace: str,
    interval_s: float,
    *,
    reap: Callable[[kube.KubeApi, str], Awaitable[object]] = reap_namespace,
    kind: str = "orphan",
) -> OrphanReaper:
    """Start the loop on the running event loop; zero or negative ``interval_s`` is refused.

    ``api`` is a client, or a function connecting one (called before each pass, so a
    cluster that is down at start-up is retried). ``reap`` is the pass (``reap_namespace``
    unless told, e.g. the agent-sandbox claim pass); ``kind`` names it in the log and the
    task name (``ironflow-reaper-<ns>`` for orphans, ``ironflow-<kind>-reaper-<ns>`` else).
    """
    if not interval_s > 0:
        raise errors.ConfigError("orphan reaper interval must be greater than zero")

    async def loop() -> None:
        while True:
            try:
                client = api if isinstance(api, kube.KubeApi) else await api()
                await reap(client, namespace)
            except errors.IronflowError as exc:
                _log.warning("%s reaping pass failed: %s", kind, exc)
            except Exception:  # a bug must not end the loop: the next pass may still work
                _log.exception("%s reaping pass failed unexpectedly", kind)
            await asyncio.sleep(interval_s)

    task_name = f"ironflow-reaper-{namespace}" if kind == "orphan" else f"ironflow-{kind}-reaper-{namespace}"
    return OrphanReaper(asyncio.get_running_loop().create_task(loop(), name=task_name))


# --- the boot sweep: what this worker pod's earlier life left -----------------------------


@dataclass(frozen=True)
class SweepReport:
    """What a boot sweep deleted, by kind (the plural of its resource), in the order swept."""

    namespace: str
    deleted: tuple[tuple[str, int], ...] = ()

    @property
    def total(self) -> int:
        return sum(n for _, n in self.deleted)

    def line(self) -> str:
        """One log line: ``swept 3 objects of an earlier life in agents: 2 pods, 1 configmaps``."""
        counts = ", ".join(f"{n} {plural}" for plural, n in self.deleted)
        return f"swept {self.total} objects of an earlier life in {self.namespace}: {counts}"


#: Jobs first (a live Job would recreate its pods), then pods, prompt ConfigMaps, claims.
SWEPT: Final = (kube.JOBS, kube.PODS, kube.CONFIGMAPS, kube.PERSISTENTVOLUMECLAIMS)


async def sweep_earlier_life(
    api: kube.KubeApi, namespace: str, worker_uid: str, *, also: Sequence[kube.Resource] = ()
) -> SweepReport:
    """Delete every managed object in ``namespace`` labelled with ``worker_uid``: at boot, before
    any run is taken, all of them are an earlier life's (a container restart keeps the pod's uid),
    whatever their expiry. ``also`` adds resources swept first (agent-sandbox's SandboxClaims).

    A kind the worker may not list (403) is skipped (its Role grants what it creates); any other listing error raises
    :class:`~ironflow.errors.CleanupError`. A failed delete is logged and left to the reaper.
    """
    selector = labels.selector(labels.MANAGED_SELECTOR, {labels.LABEL_WORKER_UID: worker_uid})
    deleted: list[tuple[str, int]] = []
    for resource in (*also, *SWEPT):
        try:
            found = await _list_all(api, resource, namespace, selector)
        except errors.KubeForbidden as exc:  # e.g. claims without environments: the reaper warns
            _log.debug("boot sweep skips %s: %s", resource.plural, exc)
            continue
        except errors.KubernetesError as exc:
            raise errors.CleanupError(f"boot sweep failed to list {resource.plural}: {exc}") from exc
        chosen = [o for o in found if not _deleting(o)]
        done = await delete_each(api, resource, namespace, chosen, background=resource is kube.JOBS, what=resource.kind)
        deleted.append((resource.plural, len(done)))
    return SweepReport(namespace, tuple(deleted))
