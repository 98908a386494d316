"""The test server's object store: what a real API server keeps in etcd, and how it changes.

Objects of every served kind, one global resourceVersion, a bounded history of watch events,
the open watches, and the server's own write semantics: server-set fields and defaults,
graceful deletion with finalizers, ownerReference cascades (Background, Foreground, Orphan)
and garbage collection. What a kubelet would do to a deleted pod is asked of a
:class:`Lifecycle` (the fake kubelet), so this module knows nothing of scripts or logs.

Stored objects are never mutated in place: every change stores a new dict, so the history
and the watchers can hold references safely.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import secrets
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_schemas as schemas

__all__ = ["BUILTINS", "Event", "Key", "Lifecycle", "Obj", "Store", "Type", "Watcher", "later", "now"]

_GENERATE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})
_JOB_LABELS: Final = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)

Obj = dict[str, Any]
Key = tuple[str, str]  # (group, plural): objects of every served version share storage


@dataclass(frozen=True)
class Type:
    """A served resource: one version of a kind, with its validator when it is a CRD."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    crd_validator: schemas.SchemaValidator | None = field(default=None, compare=False)
    builtin: bool = True

    @property
    def key(self) -> Key:
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTINS: Final = (
    Type("", "v1", "pods", "Pod", True),
    Type("", "v1", "configmaps", "ConfigMap", True),
    Type("", "v1", "secrets", "Secret", True),
    Type("", "v1", "events", "Event", True),
    Type("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    Type("", "v1", "serviceaccounts", "ServiceAccount", True),
    Type("", "v1", "services", "Service", True),
    Type("", "v1", "namespaces", "Namespace", False),
    Type("batch", "v1", "jobs", "Job", True),
    Type("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True),
    # Create-only and never stored: answered from the deny rules (:func:`._kube_verbs.review`).
    Type("authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", False),
)


@dataclass(eq=False)
class Watcher:
    """One open watch: what it selects, and the queue of event lines it has still to send."""

    type_key: Key
    api_version: str
    namespace: str | None
    labels: tuple[rules.LabelRequirement, ...]
    fields: tuple[rules.FieldRequirement, ...]
    bookmarks: bool = False  # the client sent allowWatchBookmarks=true
    queue: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)

    def selects(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return rules.matches_labels(self.labels, meta.get("labels")) and rules.matches_fields(self.fields, obj)


@dataclass(frozen=True)
class Event:
    """A change, kept in the history for watches that start from an older resourceVersion."""

    rv: int
    type_key: Key
    kind: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None


class Lifecycle(Protocol):
    """What the store asks of the fake kubelet."""

    def holds(self, uid: str) -> bool:
        """Whether a deleted pod is still being stopped (the kubelet has not confirmed)."""

    def graceful_delete(self, t: Type, obj: Obj, period: int) -> None:
        """A running pod was deleted with a grace period: stop it, then remove it."""

    def removed(self, t: Type, obj: Obj) -> None:
        """An object is gone: forget its timers, scripts and logs."""


class _NoKubelet:
    def holds(self, uid: str) -> bool:
        return False

    def graceful_delete(self, t: Type, obj: Obj, period: int) -> None:
        return None

    def removed(self, t: Type, obj: Obj) -> None:
        return None


def now() -> str:
    """The current time as the API writes it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def later(seconds: float) -> str:
    """A time ``seconds`` from now, as the API writes it."""
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """Every object, the resourceVersion counter, the watch history and the open watches."""

    def __init__(self, *, history_size: int, namespaces: Iterable[str]) -> None:
        self.types: dict[tuple[str, str, str], Type] = {(t.group, t.version, t.plural): t for t in BUILTINS}
        self.kinds: dict[Key, Type] = {t.key: t for t in BUILTINS}
        self.objects: dict[Key, dict[tuple[str, str], Obj]] = {t.key: {} for t in BUILTINS}
        self.rv = 0
        self.history: deque[Event] = deque(maxlen=history_size)
        self.compacted_rv = 0
        self.watchers: set[Watcher] = set()
        self.max_watchers = 0  # the most watches open at once (reset by the server's reset_requests)
        self.by_uid: dict[str, tuple[Key, tuple[str, str]]] = {}
        self.children: dict[str, set[tuple[Key, tuple[str, str]]]] = {}  # owner uid -> dependents
        self.lifecycle: Lifecycle = _NoKubelet()
        for ns in namespaces:
            self.insert(
                self.kinds[("", "namespaces")],
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            )

    def register(self, t: Type) -> None:
        """Serve a (custom) resource version; versions of one kind share storage."""
        self.types[(t.group, t.version, t.plural)] = t
        self.kinds.setdefault(t.key, t)
        self.objects.setdefault(t.key, {})

    def get(self, t: Type, namespace: str | None, name: str) -> Obj | None:
        """The stored object (not a copy: never mutate it), or None."""
        return self.objects[t.key].get((namespace or "", name))

    def compact(self) -> None:
        """Forget the history: every older resourceVersion is now expired."""
        self.history.clear()
        self.compacted_rv = self.rv

    def initial_lines(self, watcher: Watcher, t: Type, rv_text: str) -> list[str] | None:
        """The events a new watch starts with (None when ``rv_text`` is expired: 410). Call it and
        add the watcher without awaiting in between, so no change falls in the gap."""
        if rv_text in ("", "0"):
            return [
                json.dumps({"type": "ADDED", "object": dict(obj, apiVersion=t.api_version)}) + "\n"
                for _, obj in sorted(self.objects[t.key].items())
                if watcher.selects(obj)
            ]
        since = int(rv_text)
        if since < self.compacted_rv:
            return None
        lines = []
        for event in self.history:
            if event.rv > since and event.type_key == t.key:
                line = self.event_line(watcher, event)
                if line is not None:
                    lines.append(line)
        return lines

    def open_watch(self, watcher: Watcher) -> None:
        """Start feeding ``watcher`` the live events (right after :meth:`initial_lines`)."""
        self.watchers.add(watcher)
        self.max_watchers = max(self.max_watchers, len(self.watchers))

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def emit(self, t: Type, kind: str, obj: Obj, old: Obj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        event = Event(rv, t.key, kind, obj, old)
        if self.history.maxlen is not None and len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(event)
        for watcher in self.watchers:
            if watcher.type_key == t.key:
                line = self.event_line(watcher, event)
                if line is not None:
                    watcher.queue.put_nowait(line)

    @staticmethod
    def event_line(watcher: Watcher, event: Event) -> str | None:
        """What this watcher sees of an event: a change that makes an object match or stop
        matching its selectors arrives as ADDED or DELETED, as from a real API server."""
        now, before = watcher.selects(event.obj), watcher.selects(event.old)
        kind: str | None
        if event.kind == "MODIFIED":
            kind = ("MODIFIED" if before else "ADDED") if now else ("DELETED" if before else None)
        else:
            kind = event.kind if (now or before) else None
        if kind is None:
            return None
        obj = dict(event.obj, apiVersion=watcher.api_version)
        return json.dumps({"type": kind, "object": obj}) + "\n"

    def insert(self, t: Type, namespace: str | None, body: Obj) -> Obj:
        """Store a new object with the server's fields set, and announce it."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            prefix = str(meta.get("generateName", ""))[:58]
            meta["name"] = prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
        if t.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for server_field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        meta["resourceVersion"] = str(self.next_rv())
        if "spec" in obj:
            meta["generation"] = 1
        obj["apiVersion"], obj["kind"] = t.api_version, t.kind
        self.defaults(t, obj)
        self.put(t, (namespace or "", meta["name"]), obj, None)
        self.emit(t, "ADDED", obj, None)
        self.collect_if_orphaned(t, obj)
        return obj

    def defaults(self, t: Type, obj: Obj) -> None:
        meta = obj["metadata"]
        if t.key == ("", "pods"):
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif t.key == ("", "namespaces"):
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        elif t.key == ("batch", "jobs"):
            spec = obj.setdefault("spec", {})
            uid = meta["uid"]
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("completions", 1)
            spec.setdefault("parallelism", 1)
            spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
            template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
            labels = template_meta.setdefault("labels", {})
            for key in _JOB_LABELS:
                labels[key] = uid if key.endswith("controller-uid") else meta["name"]
            obj["status"] = {}

    def replace(self, t: Type, new: Obj) -> Obj:
        """Store a changed object under a new resourceVersion and announce it; finish its
        deletion when the last finalizer went away."""
        meta = new["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        old = self.objects[t.key][key]
        if new.get("spec") != old.get("spec") and "generation" in meta:
            meta["generation"] = int(meta["generation"]) + 1
        meta["resourceVersion"] = str(self.next_rv())
        self.put(t, key, new, old)
        self.emit(t, "MODIFIED", new, old)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self.lifecycle.holds(meta["uid"]):
            self.remove(t, new)
        else:
            self.collect_if_orphaned(t, new)
        return new

    def remove(self, t: Type, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if self.objects[t.key].get(key) is None:
            return
        self.put(t, key, None, self.objects[t.key][key])
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.next_rv())
        self.emit(t, "DELETED", gone, obj)
        uid = meta["uid"]
        self.lifecycle.removed(t, obj)
        if t.key == ("", "namespaces"):
            for store_key, store in self.objects.items():
                for (ns, _), child in list(store.items()):
                    if ns == meta["name"]:
                        self.remove(self.kinds[store_key], child)
        owners = [str(ref.get("uid", "")) for ref in meta.get("ownerReferences") or []]
        asyncio.get_running_loop().call_soon(self.collect_dependents, uid, owners)

    def put(self, t: Type, key: tuple[str, str], obj: Obj | None, old: Obj | None) -> None:
        """Store (or, with ``obj`` None, drop) an object, keeping the uid and owner indexes."""
        if old is not None:
            self.by_uid.pop(old["metadata"]["uid"], None)
            for ref in old["metadata"].get("ownerReferences") or []:
                children = self.children.get(str(ref.get("uid", "")))
                if children is not None:
                    children.discard((t.key, key))
                    if not children:
                        del self.children[str(ref.get("uid", ""))]
        if obj is None:
            del self.objects[t.key][key]
            return
        self.objects[t.key][key] = obj
        self.by_uid[obj["metadata"]["uid"]] = (t.key, key)
        for ref in obj["metadata"].get("ownerReferences") or []:
            self.children.setdefault(str(ref.get("uid", "")), set()).add((t.key, key))

    def dependents(self, uid: str) -> list[tuple[Type, Obj]]:
        return [(self.kinds[tk], self.objects[tk][key]) for tk, key in sorted(self.children.get(uid, ()))]

    def _owners_gone(self, obj: Obj) -> bool:
        owners = obj["metadata"].get("ownerReferences") or []
        return bool(owners) and all(str(ref.get("uid", "")) not in self.by_uid for ref in owners)

    def collect_if_orphaned(self, t: Type, obj: Obj) -> None:
        """An object stored with owners that are all gone is collected soon (Background), as the
        real collector does: a controller that acted on a stale read (an owner deleted meanwhile)
        leaves nothing behind."""
        if not self._owners_gone(obj):
            return
        meta = obj["metadata"]
        key, uid = (meta.get("namespace") or "", meta["name"]), meta["uid"]

        def collect() -> None:
            current = self.objects[t.key].get(key)
            if current is not None and current["metadata"]["uid"] == uid and self._owners_gone(current):
                self.delete(t, current, grace=None, policy="Background")

        asyncio.get_running_loop().call_soon(collect)

    def collect_dependents(self, owner_uid: str, owners_of_removed: list[str]) -> None:
        """The garbage collector: dependents whose owners are all gone are deleted (Background);
        an owner in foreground deletion goes once its last dependent has."""
        for t, obj in self.dependents(owner_uid):
            if self._owners_gone(obj):
                self.delete(t, obj, grace=None, policy="Background")
        for uid in owners_of_removed:
            where = self.by_uid.get(uid)
            if where is None or self.dependents(uid):
                continue
            owner = self.objects[where[0]][where[1]]
            if "foregroundDeletion" in (owner["metadata"].get("finalizers") or []):
                new = copy.deepcopy(owner)
                new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != "foregroundDeletion"]
                self.replace(self.kinds[where[0]], new)

    def delete(self, t: Type, obj: Obj, *, grace: int | None, policy: str | None) -> tuple[Obj, bool]:
        """Delete as the API server would; returns (the object as it now is, whether it is gone)."""
        meta = obj["metadata"]
        if policy is None:
            policy = "Orphan" if t.key == ("batch", "jobs") else "Background"  # batch/v1 Jobs orphan by default
        if meta.get("deletionTimestamp"):
            return obj, False  # already being deleted
        if policy == "Orphan":
            for dep_t, dep in self.dependents(meta["uid"]):
                new = copy.deepcopy(dep)
                refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != meta["uid"]]
                new["metadata"]["ownerReferences"] = refs
                if not refs:
                    del new["metadata"]["ownerReferences"]
                self.replace(dep_t, new)
        if t.key == ("", "pods"):
            phase = obj.get("status", {}).get("phase")
            scheduled = bool(obj.get("spec", {}).get("nodeName"))
            period = grace if grace is not None else int(obj["spec"].get("terminationGracePeriodSeconds", 30))
            if not scheduled or phase in _TERMINAL:
                period = 0
        else:
            period = 0
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and self.dependents(meta["uid"]):
            finalizers.append("foregroundDeletion")
        if not finalizers and period == 0:
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            self.remove(t, new)
            return new, True
        new = copy.deepcopy(obj)
        new["metadata"]["deletionTimestamp"] = later(period)
        new["metadata"]["deletionGracePeriodSeconds"] = period
        new["metadata"]["finalizers"] = finalizers
        if not finalizers:
            del new["metadata"]["finalizers"]
        if period > 0:
            self.lifecycle.graceful_delete(t, new, period)
        stored = self.replace(t, new)
        if policy == "Foreground":
            for dep_t, dep in self.dependents(meta["uid"]):
                self.delete(dep_t, dep, grace=None, policy="Background")
        return stored, False
