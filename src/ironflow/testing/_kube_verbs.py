"""The test server's verbs on stored objects: create, get, update and patch, list, delete, review.

Each takes what the request carried, already read and parsed (a body, a query, DeleteOptions),
checks it as a real API server would (strict schemas, immutable fields, resourceVersion
conflicts, preconditions) and answers the object to send, or raises a :class:`Refusal`.
Nothing here speaks HTTP or streams: watches and logs live in :mod:`._kube_streams`.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any, Final

from ironflow.testing import _kube_kubelet as kubelet_mod
from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_schemas as schemas
from ironflow.testing import _kube_store as store_mod
from ironflow.testing._kube_http import Refusal, int_param, invalid, not_found

__all__ = [
    "Denial",
    "create",
    "delete",
    "delete_collection",
    "is_denied",
    "list_objects",
    "lookup",
    "review",
    "update",
    "versioned",
]

Obj = store_mod.Obj
Type = store_mod.Type
#: (resource, verb, namespace or None for every namespace), as ``KubeTestServer.deny`` takes them.
Denial = tuple[str, str, str | None]
_MERGE_PATCHES: Final = ("application/merge-patch+json", "application/strategic-merge-patch+json")
_FIXED_META: Final = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def versioned(t: Type, obj: Obj) -> Obj:
    """The object as served at ``t``'s version (objects of every version share storage)."""
    return dict(obj, apiVersion=t.api_version)


def lookup(store: store_mod.Store, t: Type, namespace: str | None, name: str) -> Obj:
    obj = store.objects[t.key].get((namespace or "", name))
    if obj is None:
        raise not_found(t, name)
    return obj


def is_denied(denied: Collection[Denial], resource: str, verb: str, namespace: str | None) -> bool:
    return (resource, verb, namespace) in denied or (resource, verb, None) in denied


def review(body: Any, denied: Collection[Denial]) -> Obj:
    """A SubjectAccessReview's answer: allowed unless a denial covers the resource and verb."""
    attrs = (body.get("spec") or {}).get("resourceAttributes") if isinstance(body, dict) else None
    if not isinstance(attrs, dict):
        raise Refusal(
            400, "BadRequest", "spec.resourceAttributes: Required value: this test server reviews resources only"
        )
    resource = str(attrs.get("resource", "")) + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
    if is_denied(denied, resource, str(attrs.get("verb", "")), attrs.get("namespace") or None):
        return {**body, "status": {"allowed": False, "denied": True, "reason": "denied by the kube test server"}}
    return {**body, "status": {"allowed": True, "reason": "allowed by the kube test server (no deny rule)"}}


def create(
    store: store_mod.Store,
    kubelet: kubelet_mod.Kubelet,
    t: Type,
    namespace: str | None,
    body: Any,
    *,
    kubernetes_version: str,
) -> Obj:
    """Store a new object; a new pod or Job is handed to the fake kubelet and Job controller."""
    if not isinstance(body, dict):
        raise Refusal(400, "BadRequest", "the body of the request is not a JSON object")
    if body.get("kind") != t.kind or body.get("apiVersion") != t.api_version:
        raise Refusal(
            400,
            "BadRequest",
            f"the API version in the data ({body.get('apiVersion')}) and kind ({body.get('kind')}) do not "
            f"match the expected {t.api_version} {t.kind}",
        )
    meta: Obj = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
    name = str(meta.get("name") or meta.get("generateName") or "")
    if t.namespaced:
        if namespace is None:
            raise Refusal(404, "NotFound", "the server could not find the requested resource")
        if meta.get("namespace") not in (None, "", namespace):
            raise Refusal(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
    _validate(t, body, name, kubernetes_version=kubernetes_version)
    if meta.get("name") and (namespace or "", meta["name"]) in store.objects[t.key]:
        raise Refusal(
            409,
            "AlreadyExists",
            f'{t.plural}{"." + t.group if t.group else ""} "{name}" already exists',
            {"name": name, "group": t.group, "kind": t.plural},
        )
    obj = store.insert(t, namespace, body)
    if t.key == ("", "pods"):
        kubelet.pod_created(obj)
    elif t.key == ("batch", "jobs"):
        kubelet.job_created(obj)
        obj = store.objects[t.key][(namespace or "", obj["metadata"]["name"])]
    return versioned(t, obj)


def update(
    store: store_mod.Store,
    t: Type,
    current: Obj,
    body: Any,
    *,
    sub: str | None,
    content_type: str | None,
    kubernetes_version: str,
) -> Obj:
    """Replace (``content_type`` None: PUT) or merge-patch an object, or only its status (``sub``)."""
    name = current["metadata"]["name"]
    if not isinstance(body, dict):
        raise Refusal(400, "BadRequest", "the body of the request is not a JSON object")
    new: Obj
    if content_type is None:
        new = copy.deepcopy(body)
    elif content_type in _MERGE_PATCHES:
        new = rules.merge_patch(current, body)
    else:
        raise Refusal(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format ({content_type}) - accepted media types "
            "include: application/merge-patch+json, application/strategic-merge-patch+json",
        )
    meta_in: Obj = new["metadata"] if isinstance(new.get("metadata"), dict) else {}
    sent_rv = body.get("metadata", {}).get("resourceVersion") if isinstance(body.get("metadata"), dict) else None
    if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
        raise Refusal(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {t.plural} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again",
            {"name": name, "kind": t.plural},
        )
    if sub == "status":  # only status moves; everything else stays as stored
        new = dict(copy.deepcopy(current), status=new.get("status", {}))
    else:
        new["status"] = copy.deepcopy(current.get("status")) if "status" in current else new.get("status")
        if new["status"] is None:
            del new["status"]
    meta = dict(meta_in)
    for fixed in _FIXED_META:
        if fixed in current["metadata"]:
            meta[fixed] = current["metadata"][fixed]
        else:
            meta.pop(fixed, None)
    meta["resourceVersion"] = current["metadata"]["resourceVersion"]
    new["metadata"] = meta
    new["apiVersion"], new["kind"] = t.api_version, t.kind
    _validate(t, new, name, kubernetes_version=kubernetes_version)
    if sub != "status" and (problems := rules.update_problems(t.kind, current, new)):
        raise invalid(t, name, problems)
    return versioned(t, store.replace(t, new))


def list_objects(store: store_mod.Store, t: Type, namespace: str | None, query: Mapping[str, str]) -> Obj:
    """One page of a list: selectors applied, ``limit`` and ``continue`` honoured."""
    labels = rules.parse_label_selector(query.get("labelSelector"))
    fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
    limit = int_param(query, "limit")
    list_rv, after = store.rv, ""
    if query.get("continue"):
        list_rv, after = rules.decode_continue(query["continue"])
        if list_rv < store.compacted_rv:
            raise Refusal(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent "
                "list result. You can start a new list without the continue parameter.",
            )
    items: list[Obj] = []
    token = None
    for (ns, name), obj in sorted(store.objects[t.key].items()):
        if namespace is not None and ns != namespace:
            continue
        if after and f"{ns}/{name}" <= after:
            continue
        if not (rules.matches_labels(labels, obj["metadata"].get("labels")) and rules.matches_fields(fields, obj)):
            continue
        if limit and len(items) >= limit:
            last = items[-1]["metadata"]
            token = rules.encode_continue(list_rv, f"{last.get('namespace', '')}/{last['name']}")
            break
        items.append({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")})
    meta: Obj = {"resourceVersion": str(list_rv)}
    if token:
        meta["continue"] = token
    return {"kind": f"{t.kind}List", "apiVersion": t.api_version, "metadata": meta, "items": items}


def delete(store: store_mod.Store, t: Type, obj: Obj, options: Mapping[str, Any]) -> tuple[Obj, bool]:
    """Delete one object under DeleteOptions; returns what to answer and whether it is gone (200) or
    only marked for deletion (202)."""
    if (uid := options.get("preconditions", {}).get("uid")) and uid != obj["metadata"]["uid"]:
        raise Refusal(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {t.kind} "{obj["metadata"]["name"]}": the UID in the precondition '
            f"({uid}) does not match the UID in record ({obj['metadata']['uid']}). "
            "The object might have been deleted and then recreated",
        )
    result, gone = store.delete(
        t, obj, grace=options.get("gracePeriodSeconds"), policy=options.get("propagationPolicy")
    )
    return versioned(t, result), gone


def delete_collection(
    store: store_mod.Store, t: Type, namespace: str | None, query: Mapping[str, str], options: Mapping[str, Any]
) -> Obj:
    """Delete every object the selectors match; answers the list of what was deleted."""
    labels = rules.parse_label_selector(query.get("labelSelector"))
    fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
    deleted = []
    for (ns, _), obj in sorted(store.objects[t.key].items()):
        if namespace is not None and ns != namespace:
            continue
        if rules.matches_labels(labels, obj["metadata"].get("labels")) and rules.matches_fields(fields, obj):
            result, _ = store.delete(
                t, obj, grace=options.get("gracePeriodSeconds"), policy=options.get("propagationPolicy")
            )
            deleted.append(versioned(t, result))
    return {
        "kind": f"{t.kind}List",
        "apiVersion": t.api_version,
        "metadata": {"resourceVersion": str(store.rv)},
        "items": deleted,
    }


def _validate(t: Type, obj: Obj, name: str, *, kubernetes_version: str) -> None:
    problems = rules.object_problems(
        obj,
        name,
        name_is_label=t.key in (("", "namespaces"), ("batch", "jobs")),
        is_configmap=t.key == ("", "configmaps"),
    )
    validator = schemas.builtin_validator(t.kind, t.api_version, kubernetes_version) if t.builtin else t.crd_validator
    if validator is not None and isinstance(obj.get("metadata"), dict):
        if unknown := _unknown_fields(validator, obj):  # strict decoding fails before validation: 400
            version = t.api_version.rsplit("/", 1)[-1]
            fields = ", ".join(f'unknown field "{f}"' for f in unknown)
            message = f'{t.kind} in version "{version}" cannot be handled as a {t.kind}: '
            message += f"strict decoding error: {fields}"
            raise Refusal(400, "BadRequest", message)
        problems += schemas.validation_messages(validator, obj)
    if problems:
        raise invalid(t, name, problems)


def _unknown_fields(validator: Any, obj: Obj) -> list[str]:
    """Field paths the schema does not know (``spec.containers[0].imagePullPolicyy``): a real
    server refuses them with 400 under ``fieldValidation=Strict``, before any 422 check."""
    found: list[str] = []
    for error in validator.iter_errors(obj):
        if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
            continue
        known = set(error.schema.get("properties", {}))
        base = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).lstrip(".")
        found += [f"{base}.{k}" if base else k for k in error.instance if k not in known]
    return sorted(found)
