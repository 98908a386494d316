"""A Kubernetes API test server: in-process, on loopback, with real semantics for what ironflow uses.

``KubeTestServer`` speaks the REST API the real ``kubernetes_asyncio`` client speaks, so code
under test runs unchanged against it (``server.cluster_config()`` or ``server.kubeconfig_yaml()``).
It keeps namespaces, uids, a global resourceVersion, creationTimestamp and generateName; label
and field selectors; paginated lists; watches with a bounded event history (410 Gone when a
resourceVersion is older than the history); graceful deletion with deletionTimestamp and
finalizers; ownerReference cascades (Background, Foreground, Orphan); delete-collection; pod
logs that tests write and clients follow; pods/exec (``serve_exec``: the command runs in a
local subprocess standing in for the container, or is answered by a script, and a non-zero
exit comes back as a kubelet's ``NonZeroExitCode`` Status); and pod phases that tests script. Writes are checked
against ``kubernetes-validate``'s strict schemas (and registered CRDs' schemas), so what a real
API server would refuse is refused here with the same Status body.

The test drives what a kubelet and the Job controller would do: ``set_pod_phase``,
``script_pods`` (e.g. "every new claude-runner pod runs for 0.1 s, then succeeds with this
log"), ``run_job``/``script_jobs``; and breaks things on purpose: ``deny`` (403), ``fail``
(any status, or a dropped connection, on the Nth call), ``compact`` (410 for old watches),
``drop_watches``. Every request is recorded (``requests``, ``count``).

A SubjectAccessReview is answered from the same ``deny`` rules (every user has the test
token's rights): ``allowed`` unless that resource and verb are denied there.

It never does: TLS, RBAC beyond ``deny``, admission webhooks, server-side apply, scheduling.
Continued list pages are served from the current state (a real server serves its snapshot).

This module is the public facade (lifecycle and test controls). Requests are answered by
:mod:`._kube_handlers` (record, auth, denials, faults, the route table), parsed by
:mod:`._kube_http`, served by :mod:`._kube_verbs` (objects) and :mod:`._kube_streams` (watches,
logs) and :mod:`._kube_exec` (exec); the objects and their write semantics live in
:mod:`._kube_store`, the kubelet and Job controller in :mod:`._kube_kubelet`, the pure API rules
in :mod:`._kube_rules` and :mod:`._kube_schemas`.
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from aiohttp import web

from ironflow.kube import api
from ironflow.testing import _kube_exec as exec_mod
from ironflow.testing import _kube_handlers as handlers_mod
from ironflow.testing import _kube_kubelet as kubelet_mod
from ironflow.testing import _kube_schemas as schemas
from ironflow.testing import _kube_store as store_mod
from ironflow.testing._kube_exec import ExecRecord, ExecReply, ExecRunner, local_exec, scripted_exec
from ironflow.testing._kube_handlers import FaultRule, RequestRecord
from ironflow.testing._kube_kubelet import PodScript

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "ExecRecord",
    "ExecReply",
    "ExecRunner",
    "FaultRule",
    "KubeTestServer",
    "PodScript",
    "RequestRecord",
    "local_exec",
    "scripted_exec",
]

DEFAULT_KUBERNETES_VERSION: Final = "1.37"
Obj = store_mod.Obj


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
        self.store = store_mod.Store(history_size=history_size, namespaces=namespaces)
        self.kubelet = kubelet_mod.Kubelet(self.store, pod_termination_s=pod_termination_s)
        self._exec = exec_mod.ExecService()
        self._handlers = handlers_mod.Handlers(
            self.store, self.kubelet, self._exec, kubernetes_version=kubernetes_version
        )
        self._runner: web.AppRunner | None = None
        self._port = 0

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> KubeTestServer:
        """Listen on a free loopback port."""
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handlers.handle)
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
        self._handlers.closing.set()
        for watcher in list(self.store.watchers):
            watcher.queue.put_nowait(None)
        self.kubelet.stop()
        await self._exec.stop()
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
    def token(self) -> str:
        """The bearer token the server accepts (:meth:`rotate_token` issues a new one)."""
        return self._handlers.token

    @property
    def requests(self) -> list[RequestRecord]:
        """Every request received, in order of arrival (an open watch has status 0)."""
        return self._handlers.requests

    @property
    def internal_errors(self) -> list[Exception]:
        """Exceptions raised by the server's own handlers (answered with 500); a test may assert it is empty."""
        return self._handlers.internal_errors

    @property
    def max_open_watches(self) -> int:
        """The most watch connections open at once since the start or :meth:`reset_requests`."""
        return self.store.max_watchers

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

    def rotate_token(self) -> str:
        """Issue a new bearer token and refuse the old one (401), as when a short-lived token
        expires; returns the new token (write a new kubeconfig for clients to pick it up)."""
        self._handlers.token = handlers_mod.new_token()
        return self._handlers.token

    def cluster_config(self) -> api.KubeconfigInline:
        """The :class:`ironflow.kube.api.ClusterConfig` that reaches this server."""
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
            t = store_mod.Type(group, version["name"], plural, kind, namespaced, validator, builtin=False)
            self.store.register(t)
            out.append(api.custom_resource(group, version["name"], plural, kind=kind, namespaced=namespaced))
        return out

    def create_namespace(self, name: str) -> None:
        """Create a namespace (idempotent)."""
        t = self.store.kinds[("", "namespaces")]
        if self.store.get(t, None, name) is None:
            self.store.insert(t, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def objects(self, resource: api.Resource, namespace: str | None = None) -> list[Obj]:
        """Copies of the stored objects of a resource (in ``namespace``, or all)."""
        stored = self.store.objects.get((resource.group, resource.plural), {})
        return [copy.deepcopy(o) for (ns, _), o in sorted(stored.items()) if namespace is None or ns == namespace]

    def get_object(self, resource: api.Resource, namespace: str | None, name: str) -> Obj | None:
        """A copy of one stored object, or None."""
        obj = self.store.objects.get((resource.group, resource.plural), {}).get((namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    # --- test controls: faults, denials, watches ---------------------------------------

    def deny(self, resource: str, verb: str, namespace: str | None = None) -> None:
        """Answer 403 to ``verb`` (get, list, watch, create, update, patch, delete, deletecollection)
        on ``resource`` (a plural such as ``jobs``, or ``pods/log``), in one namespace or all."""
        self._handlers.denied.add((resource, verb, namespace))

    def allow(self, resource: str, verb: str, namespace: str | None = None) -> None:
        """Undo :meth:`deny`."""
        self._handlers.denied.discard((resource, verb, namespace))

    def fail(
        self,
        verb: str,
        resource: str,
        *,
        nth: int = 1,
        status: int = 500,
        times: int = 1,
        drop: bool = False,
        retry_after: int | None = None,
    ) -> FaultRule:
        """Fail the ``nth`` next call of ``verb`` on ``resource`` (and ``times - 1`` more) with ``status``
        (and a ``Retry-After`` header when given), or close the connection without an answer when
        ``drop``. Returns the rule (``fired`` counts)."""
        rule = FaultRule(verb, resource, nth=nth, status=status, times=times, drop=drop, retry_after=retry_after)
        self._handlers.faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        """Forget every fault rule and denial."""
        self._handlers.faults.clear()
        self._handlers.denied.clear()

    def compact(self) -> None:
        """Forget the watch history: a watch from any older resourceVersion now gets 410 Gone."""
        self.store.compact()

    def drop_watches(self) -> int:
        """End every open watch connection (clients must reconnect); returns how many."""
        for watcher in self.store.watchers:
            watcher.queue.put_nowait(None)
        return len(self.store.watchers)

    def send_bookmarks(self) -> int:
        """Send a BOOKMARK (the current resourceVersion) to every watch that allows them, as a
        real server does about once a minute; returns how many were sent."""
        sent = 0
        for watcher in self.store.watchers:
            if watcher.bookmarks:
                kind = self.store.kinds[watcher.type_key].kind
                meta = {"resourceVersion": str(self.store.rv)}
                obj = {"kind": kind, "apiVersion": watcher.api_version, "metadata": meta}
                watcher.queue.put_nowait(json.dumps({"type": "BOOKMARK", "object": obj}) + "\n")
                sent += 1
        return sent

    @property
    def open_watches(self) -> int:
        """Watch connections open right now."""
        return len(self.store.watchers)

    @property
    def resource_version(self) -> int:
        """The last resourceVersion handed out."""
        return self.store.rv

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
        self.store.max_watchers = len(self.store.watchers)

    # --- test controls: pods, logs, jobs (the fake kubelet and Job controller) ---------------

    def script_pods(self, script: PodScript | None = None, /, **kwargs: Any) -> PodScript:
        """Run every new pod that matches ``script`` (or ``PodScript(**kwargs)``); newest script wins."""
        return self.kubelet.script_pods(script, **kwargs)

    def script_jobs(self, script: PodScript | None = None, /, **kwargs: Any) -> PodScript:
        """Act as the Job controller for new Jobs matching the script: create one pod from the
        template and run it with the script; the Job's status follows its pod."""
        return self.kubelet.script_jobs(script, **kwargs)

    def unscript(self, script: PodScript) -> None:
        """Stop applying a pod or job script to new objects."""
        self.kubelet.unscript(script)

    def set_log(self, namespace: str, pod: str, text: str, *, container: str | None = None) -> None:
        """Replace a container's log (the pod's only or first container by default)."""
        self.kubelet.set_log(namespace, pod, text, container=container)

    def append_log(self, namespace: str, pod: str, text: str, *, container: str | None = None) -> None:
        """Append to a container's log; followers receive it at once."""
        self.kubelet.append_log(namespace, pod, text, container=container)

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
        """Move a pod to ``Pending``, ``Running``, ``Succeeded`` or ``Failed`` as a kubelet would
        report it (container statuses, start time, node name); returns a copy of the pod."""
        return self.kubelet.set_pod_phase(namespace, name, phase, exit_code=exit_code, reason=reason, message=message)

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        """Replace a pod's status as a kubelet or the scheduler would write it (a waiting container's
        reason, ``PodScheduled=False``, an eviction); returns the pod."""
        return self.kubelet.set_pod_status(namespace, name, status)

    def record_event(self, namespace: str, pod: str, kind: str, reason: str, message: str) -> None:
        """Record an event about ``pod`` as its kubelet would (``kind``: Normal or Warning)."""
        self.kubelet.record_event(namespace, pod, kind, reason, message)

    def serve_exec(self, runner: ExecRunner | None) -> None:
        """Answer pods/exec with ``runner`` (:func:`local_exec` or :func:`scripted_exec`);
        None refuses exec again (400, the default)."""
        self._exec.runner = runner

    @property
    def execs(self) -> list[ExecRecord]:
        """Every exec the server ran, in order."""
        return self._exec.execs

    @property
    def running_execs(self) -> int:
        """Commands still running (a client that left must not leave one behind)."""
        return len(self._exec.processes)

    def run_job(self, namespace: str, job: str, script: PodScript | None = None, /, **kwargs: Any) -> Obj:
        """Act as the Job controller once: create a pod for Job ``job`` from its template and run
        it with ``script`` (or ``PodScript(**kwargs)``). Returns the pod."""
        return self.kubelet.run_job(namespace, job, script, **kwargs)
