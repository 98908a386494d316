"""Create or update agent-sandbox objects (what ``ironflow sandbox apply-template`` does).

:func:`merge_patch_to` is pure: the RFC 7386 merge patch that turns the stored object's
labels, annotations and spec into the desired ones (removed keys become ``null``, lists are
replaced whole), so an update never leaves a stale field behind. :func:`apply_objects`
creates what is missing and patches what differs; status and server fields are never sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ironflow import errors
from ironflow.k8s import api as kube

__all__ = ["Applied", "apply_objects", "merge_patch_to"]


@dataclass(frozen=True)
class Applied:
    """What happened to one object."""

    kind: str
    name: str
    action: Literal["created", "updated", "unchanged"]


def _diff(current: Any, desired: Any) -> Any:
    if isinstance(current, Mapping) and isinstance(desired, Mapping):
        patch: dict[str, Any] = {}
        for key in current:
            if key not in desired:
                patch[key] = None
        for key, value in desired.items():
            if key not in current:
                patch[key] = value
            elif current[key] != value:
                patch[key] = _diff(current[key], value)
        return patch
    return desired


def merge_patch_to(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch turning ``current`` into ``desired`` for labels, annotations and spec (pure).

    Returns ``{}`` when nothing differs.

    >>> merge_patch_to({"spec": {"a": 1, "b": 2}}, {"spec": {"a": 1, "c": [3]}})
    {'spec': {'b': None, 'c': [3]}}
    """
    patch: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for key in ("labels", "annotations"):
        have = (current.get("metadata") or {}).get(key) or {}
        want = (desired.get("metadata") or {}).get(key) or {}
        # Only our keys: controllers add their own (e.g. agents.x-k8s.io/sandbox-template-ref-hash).
        changed = {k: v for k, v in want.items() if have.get(k) != v}
        if changed:
            meta[key] = changed
    if meta:
        patch["metadata"] = meta
    spec = _diff(current.get("spec") or {}, desired.get("spec") or {})
    if spec:
        patch["spec"] = spec
    return patch


async def apply_objects(
    api: kube.KubeApi, resources: Mapping[str, kube.Resource], namespace: str, objects: Sequence[Mapping[str, Any]]
) -> list[Applied]:
    """Create each object, or patch it to the desired state when it exists; ``resources`` maps kind to resource.

    Raises:
        KubernetesError: the API refused (the message names the object); earlier objects stay applied.
    """
    out: list[Applied] = []
    for obj in objects:
        kind = str(obj["kind"])
        resource = resources.get(kind)
        if resource is None:
            raise errors.ConfigError(f"apply_objects has no resource for kind {kind}")
        name = str(obj["metadata"]["name"])
        try:
            current = await api.get(resource, namespace, name)
        except errors.KubeNotFound:
            await api.create(resource, namespace, obj)
            out.append(Applied(kind, name, "created"))
            continue
        patch = merge_patch_to(current, obj)
        if patch:
            await api.patch(resource, namespace, name, patch)
            out.append(Applied(kind, name, "updated"))
        else:
            out.append(Applied(kind, name, "unchanged"))
    return out
