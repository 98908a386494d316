"""Pod lifecycle over the API: wait on the namespace's shared watch, delete and never leak.

I/O helpers shared by the step runner, ``PodRun`` / ``JobRun`` and the cleanup: they
wait through the shared pod informer (one watch per namespace, whatever the number of
waiting steps), and delete objects in a way a cancellation cannot cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar

from ironflow import errors
from ironflow.kube import api as kube
from ironflow.kube import informer

__all__ = [
    "LOG_READ_BYTES",
    "delete_quietly",
    "may_exist_after",
    "read_log_quietly",
    "shielded",
    "wait_for_pod",
    "watching",
]

_log = logging.getLogger(__name__)

#: The most of a pod's log read whole at its end: as much as a followed log keeps (``pod_wait.LOG_CAP_BYTES``).
LOG_READ_BYTES: Final = 50 * 1024 * 1024

T = TypeVar("T")


def may_exist_after(exc: BaseException) -> bool:
    """Whether the object of a create request that ended in ``exc`` may exist all the same.

    Once the create request has left, the object may exist: a cancellation or a lost answer
    (:class:`~ironflow.errors.KubeUnavailable`) tells nothing; only a refusal with a status
    (any other :class:`~ironflow.errors.KubernetesError`) proves it does not.
    """
    return not isinstance(exc, errors.KubernetesError) or isinstance(exc, errors.KubeUnavailable)


async def read_log_quietly(api: kube.KubeApi, namespace: str, pod: str) -> str:
    """The pod's log, its first :data:`LOG_READ_BYTES` (the pod writes what it likes; the worker
    holds no more), or ``""`` when the API will not give it (logged): logs are best effort."""
    try:
        return await api.read_log(namespace, pod, limit_bytes=LOG_READ_BYTES)
    except errors.KubernetesError as exc:
        _log.warning("could not read the log of pod %s: %s", pod, exc)
        return ""


async def wait_for_pod(
    api: kube.KubeApi,
    namespace: str,
    name: str,
    predicate: Callable[[Mapping[str, Any]], bool],
    timeout_s: float | None,
    *,
    uid: str | None = None,
) -> dict[str, Any] | None:
    """The pod as soon as ``predicate`` holds for it (on the shared watch); None after ``timeout_s``.
    With ``uid``, only that pod counts: an earlier one of the same name (a resumed session's) is not it.

    Raises :class:`~ironflow.errors.KubeNotFound` if the pod is deleted first, and the
    watch's error if the watch fails for good.
    """

    return await informer.informer_for(api, namespace).wait_for(name, predicate, timeout_s, uid=uid)


@contextlib.asynccontextmanager
async def watching(api: kube.KubeApi, namespace: str) -> AsyncIterator[None]:
    """Keep the namespace's shared pod watch open for the block (one list, then events only).

    A step holds it from its cleanup to its end, so waiting twice does not list twice.
    """

    async with informer.informer_for(api, namespace).hold():
        yield


async def _delete_once(
    api: kube.KubeApi,
    resource: kube.Resource,
    namespace: str,
    name: str,
    *,
    background: bool,
    expires_at: str | None,
) -> bool:
    try:
        await api.delete(resource, namespace, name, propagation_policy="Background" if background else None)
    except errors.KubeNotFound:
        return True
    except errors.KubernetesError as exc:
        when = f" (expires at {expires_at})" if expires_at else ""
        _log.warning(
            "could not delete %s %s/%s: %s; left for the orphan reaper%s", resource.kind, namespace, name, exc, when
        )
        return False
    return True


async def shielded(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even if the caller is cancelled meanwhile, then re-raise.

    For cleanup that must not be cut short: the pod of a cancelled step is still deleted.
    """
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True  # finish first, propagate after
    if cancelled:
        raise asyncio.CancelledError
    return result


async def delete_quietly(
    api: kube.KubeApi,
    resource: kube.Resource,
    namespace: str,
    name: str,
    *,
    background: bool = False,
    expires_at: str | None = None,
) -> bool:
    """Delete one object and never raise; False when it could not be deleted (logged).

    Runs to the end even when the caller is cancelled (see :func:`shielded`).
    """
    return await shielded(_delete_once(api, resource, namespace, name, background=background, expires_at=expires_at))
