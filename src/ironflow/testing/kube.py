"""A Kubernetes API test server: in-process, on loopback, with real semantics for what ironflow uses.

``KubeTestServer`` speaks the REST API the real ``kubernetes_asyncio`` client speaks, so code
under test runs unchanged against it (``server.cluster_config()`` or ``server.kubeconfig_yaml()``).
It keeps namespaces, uids, a global resourceVersion, creationTimestamp and generateName; label
and field selectors; paginated lists; watches with a bounded event history (410 Gone when a
resourceVersion is older than the history); graceful deletion with deletionTimestamp and
finalizers; ownerReference cascades (Background, Foreground, Orphan); delete-collection; pod
logs that tests write and clients follow; and pod phases that tests script. Writes are checked
against ``kubernetes-validate``'s strict schemas (and registered CRDs' schemas), so what a real
API server would refuse is refused here with the same Status body.

The test drives what a kubelet and the Job controller would do: ``set_pod_phase``,
``script_pods`` (e.g. "every new claude-runner pod runs for 0.1 s, then succeeds with this
log"), ``run_job``/``script_jobs``; and breaks things on purpose: ``deny`` (403), ``fail``
(any status, or a dropped connection, on the Nth call), ``compact`` (410 for old watches),
``drop_watches``. Every request is recorded (``requests``, ``count``).

It never does: TLS, RBAC beyond ``deny``, admission webhooks, server-side apply, scheduling.
Continued list pages are served from the current state (a real server serves its snapshot).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import json
import secrets
import socket
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final

from aiohttp import web

from ironflow.k8s import api
from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_schemas as schemas

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "FaultRule",
    "KubeTestServer",
    "PodScript",
    "RequestRecord",
]

DEFAULT_KUBERNETES_VERSION: Final = "1.37"
_GENERATE_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_CONFIGMAP_LIMIT: Final = 1024 * 1024
_ANNOTATIONS_LIMIT: Final = 256 * 1024
_TERMINAL: Final = frozenset({"Succeeded", "Failed"})
_DEADLINE_MESSAGE: Final = "Pod was active on the node longer than the specified deadline"
_JOB_LABELS: Final = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)

Obj = dict[str, Any]
_Key = tuple[str, str]  # (group, plural): objects of every served version share storage


@dataclass(frozen=True)
class _Type:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    crd_validator: schemas.SchemaValidator | None = field(default=None, compare=False)
    builtin: bool = True

    @property
    def key(self) -> _Key:
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_BUILTINS: Final = (
    _Type("", "v1", "pods", "Pod", True),
    _Type("", "v1", "configmaps", "ConfigMap", True),
    _Type("", "v1", "secrets", "Secret", True),
    _Type("", "v1", "events", "Event", True),
    _Type("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True),
    _Type("", "v1", "serviceaccounts", "ServiceAccount", True),
    _Type("", "v1", "services", "Service", True),
    _Type("", "v1", "namespaces", "Namespace", False),
    _Type("batch", "v1", "jobs", "Job", True),
    _Type("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True),
)


@dataclass(frozen=True)
class RequestRecord:
    """One request the server received (faults and denials included)."""

    verb: str
    resource: str
    namespace: str | None
    name: str | None
    status: int  # 0 while the request is still being answered (an open watch), or when dropped
    at: float


@dataclass
class FaultRule:
    """Fail calls ``nth`` .. ``nth + times - 1`` (1-based, counted from when the rule was added) of
    ``verb`` on ``resource`` with ``status``, or by closing the connection when ``drop``."""

    verb: str
    resource: str
    nth: int = 1
    status: int = 500
    times: int = 1
    drop: bool = False
    seen: int = 0
    fired: int = 0

    def hit(self, verb: str, resource: str) -> bool:
        if verb != self.verb or resource != self.resource:
            return False
        self.seen += 1
        if self.nth <= self.seen < self.nth + self.times:
            self.fired += 1
            return True
        return False


@dataclass(frozen=True)
class PodScript:
    """What the fake kubelet does with new pods matching ``name_prefix`` and ``labels``:
    Pending for ``start_after`` s, Running with ``log`` for ``run_for`` s (``None``: until
    deleted or past its deadline), then ``phase``. ``terminates=False`` keeps a deleted pod
    in Terminating for ever (a node that never answers)."""

    name_prefix: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    start_after: float = 0.0
    run_for: float | None = 0.0
    phase: str = "Succeeded"
    exit_code: int | None = None
    log: str = ""
    reason: str | None = None
    terminates: bool = True

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        labels = meta.get("labels") or {}
        return str(meta.get("name", "")).startswith(self.name_prefix) and all(
            labels.get(k) == v for k, v in self.labels.items()
        )


@dataclass(eq=False)
class _Watcher:
    type_key: _Key
    api_version: str
    namespace: str | None
    labels: tuple[rules.LabelRequirement, ...]
    fields: tuple[rules.FieldRequirement, ...]
    queue: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)

    def selects(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return rules.matches_labels(self.labels, meta.get("labels")) and rules.matches_fields(self.fields, obj)


@dataclass(frozen=True)
class _Event:
    rv: int
    type_key: _Key
    kind: str  # ADDED, MODIFIED, DELETED
    obj: Obj
    old: Obj | None


class _Refusal(Exception):
    """A request refused with a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = rules.status_body(code, reason, message, details=details)
        self.code = code


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _later(seconds: float) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _not_found(t: _Type, name: str) -> _Refusal:
    return _Refusal(
        404,
        "NotFound",
        f'{t.plural}{"." + t.group if t.group else ""} "{name}" not found',
        {"name": name, "group": t.group, "kind": t.plural},
    )


def _invalid(t: _Type, name: str, problems: list[str]) -> _Refusal:
    return _Refusal(
        422,
        "Invalid",
        f'{t.kind} "{name}" is invalid: ' + ", ".join(problems),
        {"name": name, "group": t.group, "kind": t.kind, "causes": [{"message": p} for p in problems]},
    )


class KubeTestServer:
    """An in-process Kubernetes API server for tests. ``async with KubeTestServer() as server:``.

    Args:
        kubernetes_version: schemas used to validate writes (``kubernetes-validate``).
        history_size: watch events kept; a watch from an older resourceVersion gets 410 Gone.
        pod_termination_s: how long the fake kubelet takes to stop a deleted running pod
            (bounded by the grace period; 0 removes it at once).
        namespaces: namespaces that exist from the start.
    """

    def __init__(
        self,
        *,
        kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
        history_size: int = 1000,
        pod_termination_s: float = 0.0,
        namespaces: Iterable[str] = ("default", "kube-system"),
    ) -> None:
        self.kubernetes_version = kubernetes_version
        self.pod_termination_s = pod_termination_s
        self.token = "kube-test-" + secrets.token_urlsafe(18)
        self.requests: list[RequestRecord] = []
        self.max_open_watches = 0
        #: Exceptions raised by the server's own handlers (answered with 500); a test may assert it is empty.
        self.internal_errors: list[Exception] = []
        self._types: dict[tuple[str, str, str], _Type] = {(t.group, t.version, t.plural): t for t in _BUILTINS}
        self._kinds: dict[_Key, _Type] = {t.key: t for t in _BUILTINS}
        self._objects: dict[_Key, dict[tuple[str, str], Obj]] = {t.key: {} for t in _BUILTINS}
        self._rv = 0
        self._history: deque[_Event] = deque(maxlen=history_size)
        self._compacted_rv = 0
        self._watchers: set[_Watcher] = set()
        self._denied: set[tuple[str, str, str | None]] = set()
        self._faults: list[FaultRule] = []
        self._pod_scripts: list[PodScript] = []
        self._job_scripts: list[PodScript] = []
        self._assigned: dict[str, PodScript] = {}  # pod uid -> its script
        self._logs: dict[tuple[str, str, str], str] = {}
        self._signals: dict[tuple[str, str], asyncio.Event] = {}
        self._timers: dict[str, list[asyncio.TimerHandle]] = {}  # uid -> pending transitions
        self._terminating: dict[str, asyncio.TimerHandle | None] = {}  # pod uid -> kubelet stopping it
        self._by_uid: dict[str, tuple[_Key, tuple[str, str]]] = {}
        self._children: dict[str, set[tuple[_Key, tuple[str, str]]]] = {}  # owner uid -> dependents
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port = 0
        for ns in namespaces:
            self._insert(
                self._kinds[("", "namespaces")],
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
            )

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> KubeTestServer:
        """Listen on a free loopback port."""
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0, handler_cancellation=True
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        """End every watch and log stream, cancel scripted transitions, stop listening."""
        self._closing.set()
        for watcher in list(self._watchers):
            watcher.queue.put_nowait(None)
        for signal in self._signals.values():
            signal.set()
        for handles in self._timers.values():
            for handle in handles:
                handle.cancel()
        self._timers.clear()
        for pending in self._terminating.values():
            if pending is not None:
                pending.cancel()
        self._terminating.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> KubeTestServer:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port}"

    def kubeconfig_yaml(self, *, namespace: str = "default") -> str:
        """A kubeconfig for this server (bearer-token user, context ``kube-test``)."""
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: kube-test\n  cluster:\n    server: {self.url}\n"
            f"users:\n- name: kube-test\n  user:\n    token: {self.token}\n"
            f"contexts:\n- name: kube-test\n  context:\n    cluster: kube-test\n    user: kube-test\n"
            f"    namespace: {namespace}\n"
            "current-context: kube-test\n"
        )

    def cluster_config(self) -> api.KubeconfigInline:
        """The :class:`ironflow.k8s.api.ClusterConfig` that reaches this server."""
        return api.KubeconfigInline(self.kubeconfig_yaml())

    # --- test controls: resources and namespaces ---------------------------------------

    def register_crd(self, crd: Mapping[str, Any]) -> list[api.Resource]:
        """Serve a CustomResourceDefinition (as read from its YAML): every served version,
        validated against its ``openAPIV3Schema`` (strict). Returns its :class:`Resource` per version."""
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        group, plural, kind = spec.get("group"), names.get("plural"), names.get("kind")
        if not (group and plural and kind):
            raise ValueError("register_crd needs a CRD with spec.group, spec.names.plural and spec.names.kind")
        namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        out: list[api.Resource] = []
        for version in spec.get("versions", []):
            if not version.get("served", True):
                continue
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            validator = schemas.crd_validator(schema) if schema else None
            t = _Type(group, version["name"], plural, kind, namespaced, validator, builtin=False)
            self._types[(group, version["name"], plural)] = t
            self._kinds.setdefault(t.key, t)
            self._objects.setdefault(t.key, {})
            out.append(api.custom_resource(group, version["name"], plural, kind=kind, namespaced=namespaced))
        return out

    def create_namespace(self, name: str) -> None:
        """Create a namespace (idempotent)."""
        t = self._kinds[("", "namespaces")]
        if (("", name)) not in self._objects[t.key]:
            self._insert(t, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def objects(self, resource: api.Resource, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of a resource (in ``namespace``, or all)."""
        store = self._objects.get((resource.group, resource.plural), {})
        return [copy.deepcopy(o) for (ns, _), o in sorted(store.items()) if namespace is None or ns == namespace]

    def get_object(self, resource: api.Resource, namespace: str | None, name: str) -> Obj | None:
        """A copy of one stored object, or None."""
        obj = self._objects.get((resource.group, resource.plural), {}).get((namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    # --- test controls: faults, denials, watches ---------------------------------------

    def deny(self, resource: str, verb: str, namespace: str | None = None) -> None:
        """Answer 403 to ``verb`` (get, list, watch, create, update, patch, delete, deletecollection)
        on ``resource`` (a plural such as ``jobs``, or ``pods/log``), in one namespace or all."""
        self._denied.add((resource, verb, namespace))

    def allow(self, resource: str, verb: str, namespace: str | None = None) -> None:
        """Undo :meth:`deny`."""
        self._denied.discard((resource, verb, namespace))

    def fail(
        self, verb: str, resource: str, *, nth: int = 1, status: int = 500, times: int = 1, drop: bool = False
    ) -> FaultRule:
        """Fail the ``nth`` next call of ``verb`` on ``resource`` (and ``times - 1`` more) with ``status``,
        or close the connection without an answer when ``drop``. Returns the rule (``fired`` counts)."""
        rule = FaultRule(verb, resource, nth=nth, status=status, times=times, drop=drop)
        self._faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        """Forget every fault rule and denial."""
        self._faults.clear()
        self._denied.clear()

    def compact(self) -> None:
        """Forget the watch history: a watch from any older resourceVersion now gets 410 Gone."""
        self._history.clear()
        self._compacted_rv = self._rv

    def drop_watches(self) -> int:
        """End every open watch connection (clients must reconnect); returns how many."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)
        return len(self._watchers)

    @property
    def open_watches(self) -> int:
        """Watch connections open right now."""
        return len(self._watchers)

    @property
    def resource_version(self) -> int:
        """The last resourceVersion handed out."""
        return self._rv

    def count(self, verb: str | None = None, resource: str | None = None, *, namespace: str | None = None) -> int:
        """Requests received, filtered by verb, resource and namespace."""
        return sum(
            1
            for r in self.requests
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (namespace is None or r.namespace == namespace)
        )

    def reset_requests(self) -> None:
        """Clear the request log (and the open-watch high-water mark)."""
        self.requests.clear()
        self.max_open_watches = len(self._watchers)

    # --- test controls: pods, logs, jobs -----------------------------------------------

    def script_pods(self, script: PodScript | None = None, /, **kwargs: Any) -> PodScript:
        """Run every new pod that matches ``script`` (or ``PodScript(**kwargs)``); newest script wins."""
        chosen = script if script is not None else PodScript(**kwargs)
        self._pod_scripts.insert(0, chosen)
        return chosen

    def script_jobs(self, script: PodScript | None = None, /, **kwargs: Any) -> PodScript:
        """Act as the Job controller for new Jobs matching the script: create one pod from the
        template and run it with the script; the Job's status follows its pod."""
        chosen = script if script is not None else PodScript(**kwargs)
        self._job_scripts.insert(0, chosen)
        return chosen

    def unscript(self, script: PodScript) -> None:
        """Stop applying a pod or job script to new objects."""
        for scripts in (self._pod_scripts, self._job_scripts):
            if script in scripts:
                scripts.remove(script)

    def set_log(self, namespace: str, pod: str, text: str, *, container: str | None = None) -> None:
        """Replace a container's log (the pod's only or first container by default)."""
        self._logs[(namespace, pod, container or self._default_container(namespace, pod))] = text
        self._signal(namespace, pod)

    def append_log(self, namespace: str, pod: str, text: str, *, container: str | None = None) -> None:
        """Append to a container's log; followers receive it at once."""
        key = (namespace, pod, container or self._default_container(namespace, pod))
        self._logs[key] = self._logs.get(key, "") + text
        self._signal(namespace, pod)

    def set_pod_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        exit_code: int | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> Obj:
        """Move a pod to ``Pending``, ``Running``, ``Succeeded`` or ``Failed`` as a kubelet would report it."""
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError(f"unknown pod phase {phase!r}: use Pending, Running, Succeeded, Failed or Unknown")
        t = self._kinds[("", "pods")]
        pod = self._objects[t.key].get((namespace, name))
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        new = copy.deepcopy(pod)
        status = new.setdefault("status", {})
        status["phase"] = phase
        for key, value in (("reason", reason), ("message", message)):
            if value is not None:
                status[key] = value
        containers = [c.get("name", "") for c in new.get("spec", {}).get("containers", [])]
        if phase == "Running":
            new["spec"].setdefault("nodeName", "kube-test-node")
            status.setdefault("startTime", _now())
            status["containerStatuses"] = [
                {
                    "name": c,
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": "",
                    "imageID": "",
                    "state": {"running": {"startedAt": _now()}},
                }
                for c in containers
            ]
        elif phase in _TERMINAL:
            new["spec"].setdefault("nodeName", "kube-test-node")
            code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
            status["containerStatuses"] = [
                {
                    "name": c,
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "image": "",
                    "imageID": "",
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Completed" if code == 0 else "Error",
                            "finishedAt": _now(),
                        }
                    },
                }
                for c in containers
            ]
        stored = self._replace(t, new)
        if phase == "Running":
            self._arm_deadline(stored)
        if phase in _TERMINAL:
            self._cancel_timers(stored["metadata"]["uid"])
            self._signal(namespace, name)
            self._job_pod_finished(stored)
        return copy.deepcopy(stored)

    def run_job(
        self,
        namespace: str,
        job: str,
        script: PodScript | None = None,
        /,
        **kwargs: Any,
    ) -> Obj:
        """Act as the Job controller once: create a pod for Job ``job`` from its template and run
        it with ``script`` (or ``PodScript(**kwargs)``). Returns the pod."""
        t = self._kinds[("batch", "jobs")]
        stored = self._objects[t.key].get((namespace, job))
        if stored is None:
            raise KeyError(f"no job {namespace}/{job}")
        return self._start_job_pod(stored, script if script is not None else PodScript(**kwargs))

    # --- storage -----------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, t: _Type, kind: str, obj: Obj, old: Obj | None) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        event = _Event(rv, t.key, kind, obj, old)
        if self._history.maxlen is not None and len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(event)
        for watcher in self._watchers:
            if watcher.type_key == t.key:
                line = self._event_line(watcher, event)
                if line is not None:
                    watcher.queue.put_nowait(line)

    @staticmethod
    def _event_line(watcher: _Watcher, event: _Event) -> str | None:
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

    def _insert(self, t: _Type, namespace: str | None, body: Obj) -> Obj:
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
        meta["creationTimestamp"] = _now()
        meta["resourceVersion"] = str(self._next_rv())
        if "spec" in obj:
            meta["generation"] = 1
        obj["apiVersion"], obj["kind"] = t.api_version, t.kind
        self._defaults(t, obj)
        self._put(t, (namespace or "", meta["name"]), obj, None)
        self._emit(t, "ADDED", obj, None)
        return obj

    def _defaults(self, t: _Type, obj: Obj) -> None:
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

    def _replace(self, t: _Type, new: Obj) -> Obj:
        """Store a changed object under a new resourceVersion and announce it; finish its
        deletion when the last finalizer went away."""
        meta = new["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        old = self._objects[t.key][key]
        if new.get("spec") != old.get("spec") and "generation" in meta:
            meta["generation"] = int(meta["generation"]) + 1
        meta["resourceVersion"] = str(self._next_rv())
        self._put(t, key, new, old)
        self._emit(t, "MODIFIED", new, old)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self._waits_for_kubelet(t, new):
            self._remove(t, new)
        return new

    def _waits_for_kubelet(self, t: _Type, obj: Obj) -> bool:
        return t.key == ("", "pods") and obj["metadata"]["uid"] in self._terminating

    def _remove(self, t: _Type, obj: Obj) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if self._objects[t.key].get(key) is None:
            return
        self._put(t, key, None, self._objects[t.key][key])
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit(t, "DELETED", gone, obj)
        uid = meta["uid"]
        self._cancel_timers(uid)
        if (pending := self._terminating.pop(uid, None)) is not None:
            pending.cancel()
        self._assigned.pop(uid, None)
        if t.key == ("", "pods"):
            for log_key in [k for k in self._logs if k[:2] == key]:
                del self._logs[log_key]
            self._signal(key[0], key[1])
            self._signals.pop(key, None)
        if t.key == ("", "namespaces"):
            for store_key, store in self._objects.items():
                for (ns, _), child in list(store.items()):
                    if ns == meta["name"]:
                        self._remove(self._kinds[store_key], child)
        owners = [str(ref.get("uid", "")) for ref in meta.get("ownerReferences") or []]
        asyncio.get_running_loop().call_soon(self._collect_dependents, uid, owners)

    def _put(self, t: _Type, key: tuple[str, str], obj: Obj | None, old: Obj | None) -> None:
        """Store (or, with ``obj`` None, drop) an object, keeping the uid and owner indexes."""
        if old is not None:
            self._by_uid.pop(old["metadata"]["uid"], None)
            for ref in old["metadata"].get("ownerReferences") or []:
                children = self._children.get(str(ref.get("uid", "")))
                if children is not None:
                    children.discard((t.key, key))
                    if not children:
                        del self._children[str(ref.get("uid", ""))]
        if obj is None:
            del self._objects[t.key][key]
            return
        self._objects[t.key][key] = obj
        self._by_uid[obj["metadata"]["uid"]] = (t.key, key)
        for ref in obj["metadata"].get("ownerReferences") or []:
            self._children.setdefault(str(ref.get("uid", "")), set()).add((t.key, key))

    def _dependents(self, uid: str) -> list[tuple[_Type, Obj]]:
        return [(self._kinds[tk], self._objects[tk][key]) for tk, key in sorted(self._children.get(uid, ()))]

    def _collect_dependents(self, owner_uid: str, owners_of_removed: list[str]) -> None:
        """The garbage collector: dependents whose owners are all gone are deleted (Background);
        an owner in foreground deletion goes once its last dependent has."""
        for t, obj in self._dependents(owner_uid):
            owners = obj["metadata"].get("ownerReferences") or []
            if all(str(ref.get("uid", "")) not in self._by_uid for ref in owners):
                self._delete(t, obj, grace=None, policy="Background")
        for uid in owners_of_removed:
            where = self._by_uid.get(uid)
            if where is None or self._dependents(uid):
                continue
            owner = self._objects[where[0]][where[1]]
            if "foregroundDeletion" in (owner["metadata"].get("finalizers") or []):
                new = copy.deepcopy(owner)
                new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != "foregroundDeletion"]
                self._replace(self._kinds[where[0]], new)

    def _delete(self, t: _Type, obj: Obj, *, grace: int | None, policy: str | None) -> tuple[Obj, bool]:
        """Delete as the API server would; returns (the object as it now is, whether it is gone)."""
        meta = obj["metadata"]
        if policy is None:
            policy = "Orphan" if t.key == ("batch", "jobs") else "Background"  # batch/v1 Jobs orphan by default
        if meta.get("deletionTimestamp"):
            return obj, False  # already being deleted
        if policy == "Orphan":
            for dep_t, dep in self._dependents(meta["uid"]):
                new = copy.deepcopy(dep)
                refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != meta["uid"]]
                new["metadata"]["ownerReferences"] = refs
                if not refs:
                    del new["metadata"]["ownerReferences"]
                self._replace(dep_t, new)
        if t.key == ("", "pods"):
            phase = obj.get("status", {}).get("phase")
            scheduled = bool(obj.get("spec", {}).get("nodeName"))
            period = grace if grace is not None else int(obj["spec"].get("terminationGracePeriodSeconds", 30))
            if not scheduled or phase in _TERMINAL:
                period = 0
        else:
            period = 0
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and self._dependents(meta["uid"]):
            finalizers.append("foregroundDeletion")
        if not finalizers and period == 0:
            new = copy.deepcopy(obj)
            new["metadata"]["deletionTimestamp"] = _now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            self._remove(t, new)
            return new, True
        new = copy.deepcopy(obj)
        new["metadata"]["deletionTimestamp"] = _later(period)
        new["metadata"]["deletionGracePeriodSeconds"] = period
        new["metadata"]["finalizers"] = finalizers
        if not finalizers:
            del new["metadata"]["finalizers"]
        if period > 0:
            self._arm_termination(t, new, period)
        stored = self._replace(t, new)
        if policy == "Foreground":
            for dep_t, dep in self._dependents(meta["uid"]):
                self._delete(dep_t, dep, grace=None, policy="Background")
        return stored, False

    # --- the fake kubelet and Job controller -------------------------------------------

    def _timer(self, uid: str, delay: float, callback: Any, *args: Any) -> None:
        handle = asyncio.get_running_loop().call_later(max(0.0, delay), callback, *args)
        self._timers.setdefault(uid, []).append(handle)

    def _cancel_timers(self, uid: str) -> None:
        for handle in self._timers.pop(uid, []):
            handle.cancel()

    def _signal(self, namespace: str, pod: str) -> None:
        event = self._signals.pop((namespace, pod), None)
        if event is not None:
            event.set()

    def _wait_signal(self, namespace: str, pod: str) -> asyncio.Event:
        return self._signals.setdefault((namespace, pod), asyncio.Event())

    def _default_container(self, namespace: str, pod: str) -> str:
        obj = self._objects[("", "pods")].get((namespace, pod))
        containers = (obj or {}).get("spec", {}).get("containers") or [{}]
        return str(containers[0].get("name", ""))

    def _arm_termination(self, t: _Type, obj: Obj, period: int) -> None:
        uid = obj["metadata"]["uid"]
        script = self._assigned.get(uid)
        if script is not None and not script.terminates:
            self._terminating[uid] = None  # a node that never confirms the kill
            return
        delay = min(float(period), self.pod_termination_s)
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        self._terminating[uid] = asyncio.get_running_loop().call_later(delay, self._terminated, t, ns, name, uid)

    def _terminated(self, t: _Type, namespace: str, name: str, uid: str) -> None:
        self._terminating.pop(uid, None)
        obj = self._objects[t.key].get((namespace, name))
        if obj is not None and obj["metadata"]["uid"] == uid and not obj["metadata"].get("finalizers"):
            self._remove(t, obj)

    def _apply_pod_script(self, pod: Obj) -> None:
        for script in self._pod_scripts:
            if script.matches(pod):
                self._run_script(pod, script)
                return

    def _run_script(self, pod: Obj, script: PodScript) -> None:
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta.get("namespace", ""), meta["name"]
        self._assigned[uid] = script

        def start() -> None:
            if not self._alive(ns, name, uid):
                return
            if script.log:
                self.set_log(ns, name, script.log)
            self.set_pod_phase(ns, name, "Running")
            if script.run_for is not None:
                self._timer(uid, script.run_for, finish)

        def finish() -> None:
            if self._alive(ns, name, uid):
                self.set_pod_phase(ns, name, script.phase, exit_code=script.exit_code, reason=script.reason)

        self._timer(uid, script.start_after, start)

    def _alive(self, namespace: str, name: str, uid: str) -> bool:
        obj = self._objects[("", "pods")].get((namespace, name))
        return obj is not None and obj["metadata"]["uid"] == uid and not obj["metadata"].get("deletionTimestamp")

    def _arm_deadline(self, pod: Obj) -> None:
        seconds = pod.get("spec", {}).get("activeDeadlineSeconds")
        if seconds is None:
            return
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta.get("namespace", ""), meta["name"]

        def expire() -> None:
            current = self._objects[("", "pods")].get((ns, name))
            if current is None or current["metadata"]["uid"] != uid:
                return
            if current.get("status", {}).get("phase") in _TERMINAL:
                return
            self.set_pod_phase(ns, name, "Failed", exit_code=137, reason="DeadlineExceeded", message=_DEADLINE_MESSAGE)
            self._record_event(current, "DeadlineExceeded", _DEADLINE_MESSAGE)

        self._timer(uid, float(seconds), expire)

    def _record_event(self, about: Obj, reason: str, message: str) -> None:
        meta = about["metadata"]
        t = self._kinds[("", "events")]
        self._insert(
            t,
            meta.get("namespace"),
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": meta["name"] + "."},
                "involvedObject": {
                    "kind": about.get("kind", ""),
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "namespace": meta.get("namespace", ""),
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "count": 1,
                "source": {"component": "kube-test-server"},
            },
        )

    def _start_job_pod(self, job: Obj, script: PodScript) -> Obj:
        meta = job["metadata"]
        template = copy.deepcopy(job.get("spec", {}).get("template", {}))
        pod_meta = template.get("metadata", {})
        pod_meta["generateName"] = meta["name"] + "-"
        pod_meta.pop("name", None)
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec", {})}
        pod = self._insert(self._kinds[("", "pods")], meta.get("namespace"), body)
        self._job_update(
            job,
            lambda status: status.update(
                active=int(status.get("active", 0)) + 1, startTime=status.get("startTime", _now())
            ),
        )
        self._run_script(pod, script)
        return copy.deepcopy(pod)

    def _job_update(self, job: Obj, change: Any) -> Obj | None:
        t = self._kinds[("batch", "jobs")]
        meta = job["metadata"]
        current = self._objects[t.key].get((meta.get("namespace", ""), meta["name"]))
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return None
        new = copy.deepcopy(current)
        change(new.setdefault("status", {}))
        return self._replace(t, new)

    def _job_pod_finished(self, pod: Obj) -> None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("kind") != "Job":
                continue
            job = self._objects[("batch", "jobs")].get((pod["metadata"].get("namespace", ""), ref.get("name", "")))
            if job is None or job["metadata"]["uid"] != ref.get("uid"):
                continue
            succeeded = pod["status"]["phase"] == "Succeeded"
            backoff = int(job["spec"].get("backoffLimit", 6))

            def change(status: Obj, ok: bool = succeeded, limit: int = backoff) -> None:
                status["active"] = max(0, int(status.get("active", 0)) - 1)
                if ok:
                    status["succeeded"] = int(status.get("succeeded", 0)) + 1
                    status["completionTime"] = _now()
                    status["conditions"] = [
                        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": _now()},
                        {"type": "Complete", "status": "True", "lastTransitionTime": _now()},
                    ]
                else:
                    status["failed"] = int(status.get("failed", 0)) + 1
                    if status["failed"] > limit:
                        status["conditions"] = [
                            {
                                "type": "FailureTarget",
                                "status": "True",
                                "reason": "BackoffLimitExceeded",
                                "lastTransitionTime": _now(),
                            },
                            {
                                "type": "Failed",
                                "status": "True",
                                "reason": "BackoffLimitExceeded",
                                "message": "Job has reached the specified backoff limit",
                                "lastTransitionTime": _now(),
                            },
                        ]

            if not _job_finished(job):
                self._job_update(job, change)

    def _arm_job_deadline(self, job: Obj) -> None:
        seconds = job.get("spec", {}).get("activeDeadlineSeconds")
        if seconds is None:
            return
        meta = job["metadata"]

        def expire() -> None:
            current = self._objects[("batch", "jobs")].get((meta.get("namespace", ""), meta["name"]))
            if current is None or current["metadata"]["uid"] != meta["uid"] or _job_finished(current):
                return
            message = "Job was active longer than specified deadline"

            def change(status: Obj) -> None:
                status["active"] = 0
                status["conditions"] = [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": message,
                        "lastTransitionTime": _now(),
                    },
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": message,
                        "lastTransitionTime": _now(),
                    },
                ]

            self._job_update(current, change)
            for dep_t, dep in self._dependents(meta["uid"]):
                if dep_t.key == ("", "pods"):
                    self._delete(dep_t, dep, grace=None, policy="Background")

        self._timer(meta["uid"], float(seconds), expire)

    # --- HTTP ----------------------------------------------------------------------------

    def _route(self, path: str) -> tuple[_Type, str | None, str | None, str | None]:
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _Refusal(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in self._types:
            namespace, rest = rest[1], rest[2:]
        if not rest or (group, version, rest[0]) not in self._types or len(rest) > 3:
            raise _Refusal(404, "NotFound", "the server could not find the requested resource")
        t = self._types[(group, version, rest[0])]
        if namespace is not None and not t.namespaced:
            raise _Refusal(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        return t, namespace, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        verb, resource, namespace, name = "?", request.path, None, None
        status = 500
        record: RequestRecord | None = None
        try:
            t, namespace, name, sub = self._route(request.path)
            verb = _verb(request, name)
            resource = t.plural + (f"/{sub}" if sub else "")
            # Recorded on arrival (status 0 until answered), so open watches are counted too.
            record = RequestRecord(verb, resource, namespace, name, 0, time.monotonic())
            self.requests.append(record)
            if request.headers.get("Authorization", "") != f"Bearer {self.token}":
                raise _Refusal(401, "Unauthorized", "Unauthorized")
            if (resource, verb, namespace) in self._denied or (resource, verb, None) in self._denied:
                where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
                raise _Refusal(
                    403,
                    "Forbidden",
                    f'{resource} is forbidden: User "kube-test" cannot {verb} resource "{resource}" '
                    f'in API group "{t.group}"{where}',
                    {"kind": t.plural, "group": t.group, **({"name": name} if name else {})},
                )
            for rule in self._faults:
                if rule.hit(verb, resource):
                    if rule.drop:
                        status = 0
                        if request.transport is not None:
                            request.transport.abort()
                        return web.Response(status=500)
                    raise _Refusal(rule.status, _reason_for(rule.status), f"injected fault on {verb} {resource}")
            response = await self._dispatch(request, t, namespace, name, sub, verb)
            status = response.status
            return response
        except _Refusal as refusal:
            status = refusal.code
            return _json_response(refusal.code, refusal.body)
        except rules.InvalidInput as invalid:
            status = invalid.code
            return _json_response(invalid.code, rules.status_body(invalid.code, invalid.reason, invalid.message))
        except asyncio.CancelledError:
            status = 499  # the client went away (a closed watch or log stream)
            raise
        except Exception as exc:  # a bug in this server: answer 500 and keep it for the test to see
            self.internal_errors.append(exc)
            status = 500
            return _json_response(500, rules.status_body(500, "InternalError", f"kube test server bug: {exc!r}"))
        finally:
            self._answered(record, RequestRecord(verb, resource, namespace, name, status, time.monotonic()))

    def _answered(self, record: RequestRecord | None, final: RequestRecord) -> None:
        if record is None:
            self.requests.append(final)
            return
        for index in range(len(self.requests) - 1, -1, -1):
            if self.requests[index] is record:
                self.requests[index] = dataclasses.replace(final, at=record.at)
                return

    async def _dispatch(
        self, request: web.Request, t: _Type, namespace: str | None, name: str | None, sub: str | None, verb: str
    ) -> web.StreamResponse:
        if verb == "create" and t.namespaced and ("", namespace or "") not in self._objects[("", "namespaces")]:
            raise _Refusal(
                404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
            )
        if t.namespaced and namespace is None and name is not None:
            raise _Refusal(404, "NotFound", "the server could not find the requested resource")
        if sub == "log":
            if t.key != ("", "pods") or request.method != "GET" or name is None:
                raise _Refusal(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            return await self._log(request, namespace or "", name)
        if sub not in (None, "status"):
            raise _Refusal(404, "NotFound", "the server could not find the requested resource")
        query = request.query
        if verb == "create":
            return _json_response(201, self._create(t, namespace, await _body(request)))
        if verb == "get":
            assert name is not None
            return _json_response(200, self._versioned(t, self._lookup(t, namespace, name)))
        if verb == "list":
            return _json_response(200, self._list(t, namespace, query))
        if verb == "watch":
            return await self._watch(request, t, namespace)
        if verb in ("patch", "update"):
            assert name is not None
            return _json_response(200, self._versioned(t, await self._update(request, t, namespace, name, sub, verb)))
        if verb == "delete":
            assert name is not None
            obj = self._lookup(t, namespace, name)
            options = await _delete_options(request)
            if (uid := options.get("preconditions", {}).get("uid")) and uid != obj["metadata"]["uid"]:
                raise _Refusal(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: {obj['metadata']['uid']}",
                )
            result, gone = self._delete(
                t, obj, grace=options.get("gracePeriodSeconds"), policy=options.get("propagationPolicy")
            )
            return _json_response(200 if gone else 202, self._versioned(t, result))
        if verb == "deletecollection":
            options = await _delete_options(request)
            labels = rules.parse_label_selector(query.get("labelSelector"))
            fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
            deleted = []
            for (ns, _), obj in sorted(self._objects[t.key].items()):
                if namespace is not None and ns != namespace:
                    continue
                if rules.matches_labels(labels, obj["metadata"].get("labels")) and rules.matches_fields(fields, obj):
                    result, _ = self._delete(
                        t, obj, grace=options.get("gracePeriodSeconds"), policy=options.get("propagationPolicy")
                    )
                    deleted.append(self._versioned(t, result))
            return _json_response(
                200,
                {
                    "kind": f"{t.kind}List",
                    "apiVersion": t.api_version,
                    "metadata": {"resourceVersion": str(self._rv)},
                    "items": deleted,
                },
            )
        raise _Refusal(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _versioned(self, t: _Type, obj: Obj) -> Obj:
        return dict(obj, apiVersion=t.api_version)

    def _lookup(self, t: _Type, namespace: str | None, name: str) -> Obj:
        obj = self._objects[t.key].get((namespace or "", name))
        if obj is None:
            raise _not_found(t, name)
        return obj

    def _validate(self, t: _Type, obj: Obj, name: str) -> None:
        problems: list[str] = []
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise _invalid(t, name, ["metadata: Required value"])
        if meta.get("name"):
            problems += [
                f'metadata.name: Invalid value: "{name}": {p}'
                for p in rules.name_errors(name, label=t.key in (("", "namespaces"), ("batch", "jobs")))
            ]
        elif meta.get("generateName"):
            prefix = str(meta["generateName"])
            problems += [
                f'metadata.generateName: Invalid value: "{prefix}": {p}'
                for p in rules.name_errors(prefix.rstrip("-") + "x" if prefix else "x")
            ]
        else:
            problems.append("metadata.name: Required value: name or generateName is required")
        problems += rules.label_errors(meta.get("labels"))
        annotations = meta.get("annotations") or {}
        if sum(len(str(k)) + len(str(v)) for k, v in annotations.items()) > _ANNOTATIONS_LIMIT:
            problems.append(f"metadata.annotations: Too long: must have at most {_ANNOTATIONS_LIMIT} bytes")
        if t.key == ("", "configmaps"):
            size = sum(len(str(k)) + len(str(v).encode()) for k, v in (obj.get("data") or {}).items())
            size += sum(len(str(k)) + len(str(v)) * 3 // 4 for k, v in (obj.get("binaryData") or {}).items())
            if size > _CONFIGMAP_LIMIT:
                problems.append(f"[]: Too long: must have at most {_CONFIGMAP_LIMIT} bytes")
        validator = (
            schemas.builtin_validator(t.kind, t.api_version, self.kubernetes_version) if t.builtin else t.crd_validator
        )
        if validator is not None:
            problems += schemas.validation_messages(validator, obj)
        if problems:
            raise _invalid(t, name, problems)

    def _create(self, t: _Type, namespace: str | None, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise _Refusal(400, "BadRequest", "the body of the request is not a JSON object")
        if body.get("kind") != t.kind or body.get("apiVersion") != t.api_version:
            raise _Refusal(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) and kind ({body.get('kind')}) do not "
                f"match the expected {t.api_version} {t.kind}",
            )
        meta: Obj = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
        name = str(meta.get("name") or meta.get("generateName") or "")
        if t.namespaced:
            if namespace is None:
                raise _Refusal(404, "NotFound", "the server could not find the requested resource")
            if meta.get("namespace") not in (None, "", namespace):
                raise _Refusal(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
        self._validate(t, body, name)
        if meta.get("name") and (namespace or "", meta["name"]) in self._objects[t.key]:
            raise _Refusal(
                409,
                "AlreadyExists",
                f'{t.plural}{"." + t.group if t.group else ""} "{name}" already exists',
                {"name": name, "group": t.group, "kind": t.plural},
            )
        obj = self._insert(t, namespace, body)
        if t.key == ("", "pods"):
            self._apply_pod_script(obj)
        elif t.key == ("batch", "jobs"):
            self._arm_job_deadline(obj)
            for script in self._job_scripts:
                if script.matches(obj):
                    self._start_job_pod(obj, script)
                    break
            obj = self._objects[t.key][(namespace or "", obj["metadata"]["name"])]
        return self._versioned(t, obj)

    async def _update(
        self, request: web.Request, t: _Type, namespace: str | None, name: str, sub: str | None, verb: str
    ) -> Obj:
        current = self._lookup(t, namespace, name)
        body = await _body(request)
        if not isinstance(body, dict):
            raise _Refusal(400, "BadRequest", "the body of the request is not a JSON object")
        if verb == "patch":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise _Refusal(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format ({content_type}) - accepted media types "
                    "include: application/merge-patch+json, application/strategic-merge-patch+json",
                )
            new = rules.merge_patch(current, body)
        else:
            new = copy.deepcopy(body)
        meta_in = new.get("metadata") if isinstance(new.get("metadata"), dict) else {}
        sent_rv = body.get("metadata", {}).get("resourceVersion") if isinstance(body.get("metadata"), dict) else None
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise _Refusal(
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
        for fixed in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if fixed in current["metadata"]:
                meta[fixed] = current["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        new["metadata"] = meta
        new["apiVersion"], new["kind"] = t.api_version, t.kind
        self._validate(t, new, name)
        if t.key == ("", "pods") and sub != "status":
            self._check_pod_update(t, current, new, name)
        return self._replace(t, new)

    @staticmethod
    def _check_pod_update(t: _Type, current: Obj, new: Obj, name: str) -> None:
        def mutable_view(spec: Obj) -> Obj:
            view = copy.deepcopy(spec)
            view.pop("activeDeadlineSeconds", None)
            view.pop("tolerations", None)
            view.pop("nodeName", None)
            for container in view.get("containers", []) + view.get("initContainers", []):
                container.pop("image", None)
            return view

        if mutable_view(current.get("spec", {})) != mutable_view(new.get("spec", {})):
            raise _invalid(
                t,
                name,
                [
                    "spec: Forbidden: pod updates may not change fields other than "
                    "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                    "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                    "existing tolerations)"
                ],
            )

    def _list(self, t: _Type, namespace: str | None, query: Mapping[str, str]) -> Obj:
        labels = rules.parse_label_selector(query.get("labelSelector"))
        fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
        limit = _int_param(query, "limit")
        list_rv, after = self._rv, ""
        if query.get("continue"):
            list_rv, after = rules.decode_continue(query["continue"])
            if list_rv < self._compacted_rv:
                raise _Refusal(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                )
        items: list[Obj] = []
        token = None
        for (ns, name), obj in sorted(self._objects[t.key].items()):
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

    async def _watch(self, request: web.Request, t: _Type, namespace: str | None) -> web.StreamResponse:
        query = request.query
        labels = rules.parse_label_selector(query.get("labelSelector"))
        fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
        timeout = _int_param(query, "timeoutSeconds") or 1800
        rv_text = query.get("resourceVersion", "")
        if rv_text not in ("", "0") and not rv_text.isdigit():
            raise _Refusal(400, "BadRequest", f'invalid resource version "{rv_text}"')
        watcher = _Watcher(t.key, t.api_version, namespace, labels, fields)
        # Synchronously, with no await in between: the initial events and the live feed join without a gap.
        initial: list[str] = []
        gone = False
        if rv_text in ("", "0"):
            for _, obj in sorted(self._objects[t.key].items()):
                if watcher.selects(obj):
                    initial.append(json.dumps({"type": "ADDED", "object": self._versioned(t, obj)}) + "\n")
        elif int(rv_text) < self._compacted_rv:
            gone = True
        else:
            since = int(rv_text)
            for event in self._history:
                if event.rv > since and event.type_key == t.key:
                    line = self._event_line(watcher, event)
                    if line is not None:
                        initial.append(line)
        if not gone:
            self._watchers.add(watcher)
            self.max_open_watches = max(self.max_open_watches, len(self._watchers))
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if gone:
                status = rules.status_body(
                    410, "Expired", f"too old resource version: {rv_text} ({self._compacted_rv})"
                )
                await response.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())
                return response
            for line in initial:
                await response.write(line.encode())
            deadline = asyncio.get_running_loop().time() + timeout
            while not self._closing.is_set():
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    line_or_end = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    break
                if line_or_end is None:
                    break
                await response.write(line_or_end.encode())
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._watchers.discard(watcher)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        t = self._kinds[("", "pods")]
        pod = self._lookup(t, namespace, name)
        containers = [c.get("name", "") for c in pod.get("spec", {}).get("containers", [])]
        container = request.query.get("container")
        if container is None:
            if len(containers) > 1:
                raise _Refusal(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]",
                )
            container = containers[0] if containers else ""
        elif container not in containers:
            raise _Refusal(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if pod.get("status", {}).get("phase", "Pending") == "Pending":
            raise _Refusal(
                400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        key = (namespace, name, container)
        text = self._logs.get(key, "")
        if (tail := _int_param(request.query, "tailLines")) is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-tail:]) if tail > 0 else ""
        if (limit := _int_param(request.query, "limitBytes")) is not None:
            text = text.encode()[:limit].decode(errors="ignore")
        if request.query.get("follow") not in ("true", "1", "True"):
            return web.Response(status=200, text=text, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        uid = pod["metadata"]["uid"]
        sent = len(self._logs.get(key, ""))
        try:
            await response.prepare(request)
            if text:
                await response.write(text.encode())
            while not self._closing.is_set():
                signal = self._wait_signal(namespace, name)
                current = self._objects[t.key].get((namespace, name))
                full = self._logs.get(key, "")
                if len(full) > sent:
                    await response.write(full[sent:].encode())
                    sent = len(full)
                    continue
                if current is None or current["metadata"]["uid"] != uid:
                    break
                if current.get("status", {}).get("phase") in _TERMINAL:
                    break
                await signal.wait()
        except (ConnectionResetError, ConnectionError):
            return response
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response


def _job_finished(job: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


def _verb(request: web.Request, name: str | None) -> str:
    method = request.method
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if request.query.get("watch") in ("true", "1", "True") else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name is not None else "deletecollection",
    }.get(method, method.lower())


def _reason_for(status: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(status, "Unknown")


def _int_param(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise _Refusal(400, "BadRequest", f"invalid {key} {raw!r}: must be an integer") from exc


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise _Refusal(400, "BadRequest", "the body of the request could not be decoded as JSON") from exc


async def _delete_options(request: web.Request) -> Obj:
    options: Obj = {}
    body = await _body(request)
    if isinstance(body, dict):
        options.update(
            {k: v for k, v in body.items() if k in ("gracePeriodSeconds", "propagationPolicy", "preconditions")}
        )
    if (grace := _int_param(request.query, "gracePeriodSeconds")) is not None:
        options["gracePeriodSeconds"] = grace
    if policy := request.query.get("propagationPolicy"):
        options["propagationPolicy"] = policy
    if options.get("propagationPolicy") not in (None, "Orphan", "Background", "Foreground"):
        raise _Refusal(
            422,
            "Invalid",
            f'propagationPolicy: Unsupported value: "{options["propagationPolicy"]}": '
            'supported values: "Foreground", "Background", "Orphan"',
        )
    return options
