"""Create or update agent-sandbox objects (what ``ironflow sandbox apply-template`` does).

:func:`merge_patch_to` is pure: the RFC 7386 merge patch that turns the stored object's
labels, annotations and spec into the desired ones (removed keys become ``null``, lists are
replaced whole), so an update never leaves a stale field behind. :func:`apply_objects`
creates what is missing and patches what differs (a PersistentVolumeClaim is only created);
status and server fields are never sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ironflow import errors
from ironflow.agent_sandbox import schemas
from ironflow.kube import api as kube

__all__ = ["Applied", "apply_objects", "merge_patch_to"]

#: Kept as they are once they exist: a bound claim's spec cannot change, and its data is the point.
_CREATE_ONLY: Final = frozenset({"PersistentVolumeClaim"})


@dataclass(frozen=True)
class Applied:
    """What happened to one object."""

    kind: str
    name: str
    action: Literal["created", "updated", "unchanged"]


def _defaulted(schema: Mapping[str, Any], key: str, value: Any) -> bool:
    """The server filled ``key`` with its schema default (our object leaves it out)."""
    prop = (schema.get("properties") or {}).get(key) or {}
    return "default" in prop and prop["default"] == value


def _diff(current: Any, desired: Any, schema: Mapping[str, Any]) -> Any:
    if isinstance(current, Mapping) and isinstance(desired, Mapping):
        patch: dict[str, Any] = {}
        for key in current:
            if key not in desired and not _defaulted(schema, key, current[key]):
                patch[key] = None
        props = schema.get("properties") or {}
        for key, value in desired.items():
            if key not in current:
                patch[key] = value
            elif current[key] != value:
                sub = _diff(current[key], value, props.get(key) or {})
                both = isinstance(current[key], Mapping) and isinstance(value, Mapping)
                if sub != {} or not both:  # two maps differing only by defaults: no change
                    patch[key] = sub
        return patch
    return desired


def merge_patch_to(
    current: Mapping[str, Any], desired: Mapping[str, Any], *, spec_schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The merge patch turning ``current`` into ``desired`` for labels, annotations and spec (pure).

    Returns ``{}`` when nothing differs. With ``spec_schema`` (the CRD's schema of ``spec``), a
    field ``desired`` leaves out that holds its schema default is no difference: the apiserver
    fills defaults in (v1beta1 SandboxTemplate: ``envVarsInjectionPolicy``...), so without the
    schema a re-apply would always "update".

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
    spec = _diff(current.get("spec") or {}, desired.get("spec") or {}, spec_schema or {})
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
        if kind in _CREATE_ONLY:
            out.append(Applied(kind, name, "unchanged"))
            continue
        patch = merge_patch_to(current, obj, spec_schema=_spec_schema(kind, str(obj.get("apiVersion", ""))))
        if patch:
            await api.patch(resource, namespace, name, patch)
            out.append(Applied(kind, name, "updated"))
        else:
            out.append(Applied(kind, name, "unchanged"))
    return out


def _spec_schema(kind: str, api_version: str) -> Mapping[str, Any]:
    """The shipped CRD schema of ``spec`` for this kind and version (empty when unknown)."""
    try:
        schema = schemas.openapi_schema(kind, api_version.rpartition("/")[2])
    except (errors.ConfigError, KeyError):
        return {}
    spec: Mapping[str, Any] = (schema.get("properties") or {}).get("spec") or {}
    return spec
