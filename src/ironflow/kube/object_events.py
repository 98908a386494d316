"""The events of one object, read for an error message (best effort).

An error that says why a pod cannot start reads better with what the kubelet and the
scheduler said about it (``Failed to pull image ...``); those live in ``events``, not in
the pod. Reading them must never hide the error it decorates: a refused or failed list
(no ``list events`` right, an API that went away) gives no events, logged.
"""

from __future__ import annotations

import asyncio
import logging

from ironflow import errors
from ironflow.kube import api as kube
from ironflow.kube import pod_problems

__all__ = ["describe_recent", "events_of"]

_log = logging.getLogger(__name__)


async def events_of(api: kube.KubeApi, namespace: str, kind: str, name: str) -> list[kube.KubeObject]:
    """The events about object ``kind/name`` in ``namespace`` (one list, by field selector); ``[]``
    when the API will not give them."""
    page = await _list(api, namespace, _selector(kind, name))
    return [] if page is None else list(page.items)


def _selector(kind: str, name: str) -> str:
    return f"involvedObject.kind={kind},involvedObject.name={name}"


async def _list(api: kube.KubeApi, namespace: str, selector: str) -> kube.ObjectList | None:
    try:
        return await api.list(kube.EVENTS, namespace, field_selector=selector, limit=100)
    except errors.KubernetesError as exc:
        _log.info("could not read the events (%s) in %s: %s", selector, namespace, exc)
        return None


async def describe_recent(
    api: kube.KubeApi, namespace: str, kind: str, name: str, *, await_warning_s: float = 0.0
) -> str:
    """The newest events of ``kind/name`` as bounded lines (:func:`~.pod_problems.describe_events`).

    With ``await_warning_s``, a list with no ``Warning`` yet is followed on a watch for that long:
    the kubelet writes a container's waiting state and its ``Warning Failed`` event separately,
    so the event can land just after the state that ended the step."""
    selector = _selector(kind, name)
    page = await _list(api, namespace, selector)
    if page is None:
        return ""
    found = list(page.items)
    if await_warning_s > 0 and not _has_warning(found):
        try:
            async with asyncio.timeout(await_warning_s):
                stream = api.watch_stream(
                    kube.EVENTS, namespace, resource_version=page.resource_version, field_selector=selector
                )
                async for event in stream:
                    if event.type in ("ADDED", "MODIFIED"):
                        found.append(event.object)
                        if _has_warning([event.object]):
                            break
        except TimeoutError:
            pass
        except errors.KubernetesError as exc:
            _log.info("could not watch the events of %s %s/%s: %s", kind, namespace, name, exc)
    return pod_problems.describe_events(found)


def _has_warning(found: list[kube.KubeObject]) -> bool:
    return any(event.get("type") == "Warning" for event in found)
