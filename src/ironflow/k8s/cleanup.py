"""Remove a run's objects (``release_run``), or the previous attempt of a step, and wait.

A :class:`Selection` says what to delete and how to name it in messages; it is a pure
value (``run_selection``, ``step_selection``). One routine, ``delete_and_wait``,
applies any selection: Jobs first (a live Job would recreate its pods), then pods,
then it waits until every deleted pod is gone, then ConfigMaps, best effort. Its steps
``delete_matching`` and ``wait_deleted`` also serve the agent-sandbox claims.

Invariant: when ``delete_and_wait`` returns, no pod of the selection is running, so a
retry that resets shared state never runs next to an agent of the dead attempt. Every
failure is a :class:`~ironflow.errors.CleanupError` (replayable) naming the run or step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ironflow import errors, labels
from ironflow.kube import api as kube
from ironflow.kube import informer

__all__ = [
    "Selection",
    "delete_and_wait",
    "delete_matching",
    "run_selection",
    "step_selection",
    "wait_deleted",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selection:
    """Label selectors per kind, and ``what``: the words that name them in messages."""

    pods: tuple[str, ...]
    jobs: tuple[str, ...]
    configmaps: tuple[str, ...]
    what: str


def run_selection(run_id: str) -> Selection:
    """Everything of a run and of runs whose root it is: any component, Jobs, prompts."""
    run = labels.sanitize_label_value(run_id)
    managed = (
        labels.selector(labels.MANAGED_SELECTOR, {labels.LABEL_RUN_ID: run}),
        labels.selector(labels.MANAGED_SELECTOR, {labels.LABEL_ROOT_RUN_ID: run}),
    )
    return Selection(
        pods=managed,
        jobs=managed,
        configmaps=(
            labels.selector(labels.PROMPT_SELECTOR, {labels.LABEL_RUN_ID: run}),
            labels.selector(labels.PROMPT_SELECTOR, {labels.LABEL_ROOT_RUN_ID: run}),
        ),
        what=f"run {run_id}",
    )


def step_selection(run: str, step: str) -> Selection:
    """The agent pod and prompt of one step of one run, label values as written on the pod."""
    pairs = {labels.LABEL_RUN_ID: run, labels.LABEL_STEP: step}
    return Selection(
        pods=(labels.selector(labels.RUNNER_SELECTOR, pairs),),
        jobs=(),
        configmaps=(labels.selector(labels.PROMPT_SELECTOR, pairs),),
        what=f"the previous attempt of step {step} of run {run}",
    )


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _format_limit(limit_s: float) -> str:
    return f"{limit_s:g}s"


async def delete_matching(
    api: kube.KubeApi,
    resource: kube.Resource,
    namespace: str,
    selectors: Sequence[str],
    *,
    what: str,
    noun: str,
    propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
    forbidden: str | None = None,
) -> dict[str, str]:
    """Delete every object matching any selector, once each (deduplicated by uid).

    Returns ``{uid: name}`` of what was deleted (already gone: skipped), for the caller to wait on.
    With ``forbidden``, a 403 on a listing skips that selector with this warning.

    Raises:
        CleanupError: a listing (other than a tolerated 403) or a delete failed, naming the ``noun`` and ``what``.
    """
    seen: dict[str, str] = {}
    for sel in selectors:
        try:
            listed = (await api.list_all(resource, namespace, label_selector=sel)).items
        except errors.KubeForbidden as exc:
            if forbidden is None:
                raise errors.CleanupError(f"failed to list {noun}s of {what}: {exc}") from exc
            _log.warning("%s", forbidden)
            continue
        except errors.KubernetesError as exc:
            raise errors.CleanupError(f"failed to list {noun}s of {what}: {exc}") from exc
        for obj in listed:
            meta = _meta(obj)
            seen.setdefault(str(meta.get("uid") or meta.get("name")), str(meta.get("name")))
    deleted: dict[str, str] = {}
    for uid, name in seen.items():
        try:
            await api.delete(resource, namespace, name, propagation_policy=propagation_policy)
        except errors.KubeNotFound:
            continue
        except errors.KubernetesError as exc:
            raise errors.CleanupError(f"failed to delete {noun} '{name}' of {what}: {exc}") from exc
        deleted[uid] = name
    return deleted


async def wait_deleted(
    api: kube.KubeApi,
    resource: kube.Resource,
    namespace: str,
    deleted: Mapping[str, str],
    limit_s: float,
    *,
    what: str,
    noun: str,
) -> None:
    """Return once each object of ``deleted`` (``{uid: name}``; this uid) is gone, on the shared watch.

    Raises:
        CleanupError: some are still there after ``limit_s`` (naming the time elapsed), or the watch failed.
    """
    if not deleted:
        return
    shared = informer.informer_for(api, namespace, resource)
    started = time.monotonic()
    try:
        await asyncio.wait_for(
            asyncio.gather(*(shared.wait_deleted(name, uid) for uid, name in deleted.items())), timeout=limit_s
        )
    except TimeoutError:
        elapsed = time.monotonic() - started
        raise errors.CleanupError(
            f"{noun}s of {what} still terminating after {_format_limit(limit_s)}: {elapsed:.1f}s elapsed"
        ) from None
    except errors.KubernetesError as exc:
        raise errors.CleanupError(f"failed waiting for the {noun}s of {what}: {exc}") from exc


async def delete_and_wait(api: kube.KubeApi, namespace: str, selection: Selection, limit_s: float) -> int:
    """Apply ``selection`` in ``namespace``; returns how many pods were deleted.

    Raises :class:`~ironflow.errors.CleanupError` when a listing or a delete fails, or
    when the pods are still there after ``limit_s`` seconds.
    """
    what = selection.what
    # 1. Jobs, with their pods in the background (the Job controller's garbage), once each.
    await delete_matching(
        api,
        kube.JOBS,
        namespace,
        selection.jobs,
        what=what,
        noun="Job",
        propagation_policy="Background",
        forbidden=f"cannot list Jobs: JobRun Jobs of {what} are not deleted; grant list and delete on jobs",
    )

    # 2. Pods, deduplicated by uid (a child run's pod matches both selectors).
    deleted = await delete_matching(api, kube.PODS, namespace, selection.pods, what=what, noun="pod")

    # 3. Wait until each deleted pod (this uid) is gone, on the namespace's shared watch.
    await wait_deleted(api, kube.PODS, namespace, deleted, limit_s, what=what, noun="pod")
    if deleted:
        _log.info("deleted %d pods of %s", len(deleted), what)

    # 4. ConfigMaps last, best effort: the reaper takes any leftover.
    names: set[str] = set()
    for sel in selection.configmaps:
        try:
            cms = (await api.list_all(kube.CONFIGMAPS, namespace, label_selector=sel)).items
        except errors.KubernetesError as exc:
            _log.warning("failed to list prompt ConfigMaps of %s: %s", what, exc)
            continue
        names.update(str(_meta(cm).get("name")) for cm in cms)
    for name in sorted(names):
        try:
            await api.delete(kube.CONFIGMAPS, namespace, name)
        except errors.KubeNotFound:
            pass
        except errors.KubernetesError as exc:
            _log.warning("failed to delete ConfigMap '%s' of %s: %s", name, what, exc)
    return len(deleted)
