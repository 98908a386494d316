"""The events of one object, read for an error message (best effort).

An error that says why a pod cannot start reads better with what the kubelet and the
scheduler said about it (``Failed to pull image ...``); those live in ``events``, not in
the pod. Reading them must never hide the error it decorates: a refused or failed list
(no ``list events`` right, an API that went away) gives no events, logged.
"""

from __future__ import annotations

import logging

from ironflow import errors
from ironflow.kube import api as kube
from ironflow.kube import pod_problems

__all__ = ["describe_recent", "events_of"]

_log = logging.getLogger(__name__)


async def events_of(api: kube.KubeApi, namespace: str, kind: str, name: str) -> list[kube.KubeObject]:
    """The events about object ``kind/name`` in ``namespace`` (one list, by field selector); ``[]``
    when the API will not give them."""
    selector = f"involvedObject.kind={kind},involvedObject.name={name}"
    try:
        return (await api.list(kube.EVENTS, namespace, field_selector=selector, limit=100)).items
    except errors.KubernetesError as exc:
        _log.info("could not read the events of %s %s/%s: %s", kind, namespace, name, exc)
        return []


async def describe_recent(api: kube.KubeApi, namespace: str, kind: str, name: str) -> str:
    """The newest events of ``kind/name`` as bounded lines (:func:`~.pod_problems.describe_events`)."""
    return pod_problems.describe_events(await events_of(api, namespace, kind, name))
