"""The worker pod as owner of what it creates (pure): read from its env, stamped on each object.

A worker running in a pod learns its own name, uid and namespace from the downward API
(``IRONFLOW_WORKER_POD_*``, set by the rendered Deployment and the Helm chart). Every
ironflow-managed object it creates then carries the label :data:`~ironflow.labels.LABEL_WORKER_UID`
(so a restarted worker finds what its earlier life left, in any namespace) and, only when
the object lives in the worker pod's own namespace, an ownerReference to that pod (so
deleting the worker pod lets the garbage collector take them).

Never across namespaces: Kubernetes has no cross-namespace owners; a namespaced object
whose ownerReference names an owner in another namespace is treated as owner-absent and
deleted by the garbage collector at once. Outside a cluster (no env) nothing is stamped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ironflow import errors, labels

__all__ = ["ENV_NAME", "ENV_NAMESPACE", "ENV_UID", "WorkerOwner", "owner_from_env", "stamp"]

ENV_NAME: Final = "IRONFLOW_WORKER_POD_NAME"
ENV_UID: Final = "IRONFLOW_WORKER_POD_UID"
ENV_NAMESPACE: Final = "IRONFLOW_WORKER_POD_NAMESPACE"
_ENV: Final = (ENV_NAME, ENV_UID, ENV_NAMESPACE)


@dataclass(frozen=True)
class WorkerOwner:
    """The worker pod: what an ownerReference names and the uid label carries."""

    name: str
    uid: str
    namespace: str

    def reference(self) -> dict[str, Any]:
        """An ownerReference to the pod: not the controller (a Deployment's ReplicaSet is), and
        not blocking its deletion (the worker pod must go at once, its dependents after)."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": self.name,
            "uid": self.uid,
            "controller": False,
            "blockOwnerDeletion": False,
        }


def owner_from_env(env: Mapping[str, str]) -> WorkerOwner | None:
    """The worker pod the downward-API variables name, or None when none is set (outside a cluster).

    Raises:
        ConfigError: some but not all of the three are set (a Deployment missing one).

    >>> owner_from_env({}) is None
    True
    >>> owner_from_env({ENV_NAME: "w", ENV_UID: "u1", ENV_NAMESPACE: "ironflow"})
    WorkerOwner(name='w', uid='u1', namespace='ironflow')
    """
    values = {key: env.get(key, "").strip() for key in _ENV}
    missing = [key for key, value in values.items() if not value]
    if len(missing) == len(_ENV):
        return None
    if missing:
        raise errors.ConfigError(
            f"{', '.join(missing)} unset while {', '.join(k for k in _ENV if k not in missing)} set: "
            "the worker pod needs all three from the downward API (metadata.name, metadata.uid, "
            "metadata.namespace), or none outside a cluster"
        )
    return WorkerOwner(values[ENV_NAME], values[ENV_UID], values[ENV_NAMESPACE])


def _managed(metadata: Mapping[str, Any]) -> bool:
    found = metadata.get("labels")
    return isinstance(found, Mapping) and found.get(labels.LABEL_MANAGED_BY) == labels.MANAGED_BY_VALUE


def stamp(body: Mapping[str, Any], namespace: str | None, owner: WorkerOwner | None) -> Mapping[str, Any]:
    """``body`` to create in ``namespace``, bound to the worker pod ``owner``: unchanged without an
    owner or for an object ironflow does not manage; else a copy with the worker-uid label and,
    in the owner's own namespace only, the ownerReference (added to any it has).

    >>> owner = WorkerOwner("w", "u1", "ironflow")
    >>> pod = {"metadata": {"name": "p", "labels": {"app.kubernetes.io/managed-by": "ironflow"}}}
    >>> stamp(pod, "ironflow", owner)["metadata"]["ownerReferences"][0]["uid"]
    'u1'
    >>> "ownerReferences" in stamp(pod, "agents", owner)["metadata"]
    False
    """
    metadata = body.get("metadata")
    if owner is None or not isinstance(metadata, Mapping) or not _managed(metadata):
        return body
    meta = dict(metadata)
    meta["labels"] = {**metadata["labels"], labels.LABEL_WORKER_UID: owner.uid}
    if namespace == owner.namespace:
        refs = [
            r
            for r in metadata.get("ownerReferences") or ()
            if not (isinstance(r, Mapping) and r.get("uid") == owner.uid)
        ]
        meta["ownerReferences"] = [*refs, owner.reference()]
    return {**body, "metadata": meta}
