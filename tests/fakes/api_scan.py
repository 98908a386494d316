"""Every API object a token could hide in, as one text to search (I/O): the real-node tests'
check that a token delivered by exec never lands in the cluster's state."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ironflow.kube import api as k8s

#: The kinds a delivery could leak into: the pod itself (env, args, annotations), its events, and
#: the objects a manifest would carry a secret in.
KINDS = (k8s.PODS, k8s.EVENTS, k8s.CONFIGMAPS, k8s.SECRETS)


async def objects_text(
    api: k8s.KubeApi,
    namespaces: Iterable[str],
    *,
    extra: Iterable[k8s.Resource] = (),
    logs: Iterable[tuple[str, str]] = (),
) -> str:
    """The objects of ``KINDS`` and ``extra`` in each namespace, and the logs of the ``(namespace,
    pod)`` pairs, as JSON text."""
    found: list[object] = []
    for ns in namespaces:
        for resource in (*KINDS, *extra):
            found += (await api.list(resource, ns)).items
    text = json.dumps(found)
    for ns, pod in logs:
        text += await api.read_log(ns, pod)
    return text
