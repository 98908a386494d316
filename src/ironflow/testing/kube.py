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

This module is the HTTP face (routing, auth, denials, faults, the verbs); the objects and
their write semantics live in :mod:`._kube_store`, the kubelet and Job controller in
:mod:`._kube_kubelet`, exec in :mod:`._kube_exec`, the pure API rules in :mod:`._kube_rules` and :mod:`._kube_schemas`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import secrets
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from aiohttp import web

from ironflow.kube import api
from ironflow.testing import _kube_exec as exec_mod
from ironflow.testing import _kube_kubelet as kubelet_mod
from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_schemas as schemas
from ironflow.testing import _kube_store as store_mod
from ironflow.testing._kube_exec import ExecRecord, ExecReply, ExecRunner, local_exec, scripted_exec
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
_Type = store_mod.Type


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
    retry_after: int | None = None  # seconds, sent as Retry-After (e.g. with 429)
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


class _Refusal(Exception):
    """A request refused with a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = rules.status_body(code, reason, message, details=details)
        self.code = code


def _json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _not_found(t: _Type, name: str) -> _Refusal:
    return _Refusal(
        404,
        "NotFound",
        f'{t.plural}{"." + t.group if t.group else ""} "{name}" not found',
        {"name": name, "group": t.group, "kind": t.plural},
    )


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
        self.token = "kube-test-" + secrets.token_urlsafe(18)
        self.requests: list[RequestRecord] = []
        self.max_open_watches = 0
        #: Exceptions raised by the server's own handlers (answered with 500); a test may assert it is empty.
        self.internal_errors: list[Exception] = []
        self.store = store_mod.Store(history_size=history_size, namespaces=namespaces)
        self.kubelet = kubelet_mod.Kubelet(self.store, pod_termination_s=pod_termination_s)
        self._exec = exec_mod.ExecService()
        self._denied: set[tuple[str, str, str | None]] = set()
        self._faults: list[FaultRule] = []
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port = 0

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
        for watcher in list(self.store.watchers):
            watcher.queue.put_nowait(None)
        self.kubelet.stop()
        self._exec.stop()
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

    def rotate_token(self) -> str:
        """Issue a new bearer token and refuse the old one (401), as when a short-lived token
        expires; returns the new token (write a new kubeconfig for clients to pick it up)."""
        self.token = "kube-test-" + secrets.token_urlsafe(18)
        return self.token

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
            t = _Type(group, version["name"], plural, kind, namespaced, validator, builtin=False)
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
        self._denied.add((resource, verb, namespace))

    def allow(self, resource: str, verb: str, namespace: str | None = None) -> None:
        """Undo :meth:`deny`."""
        self._denied.discard((resource, verb, namespace))

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
        self._faults.append(rule)
        return rule

    def clear_faults(self) -> None:
        """Forget every fault rule and denial."""
        self._faults.clear()
        self._denied.clear()

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
        self.max_open_watches = len(self.store.watchers)

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
        if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in self.store.types:
            namespace, rest = rest[1], rest[2:]
        if not rest or (group, version, rest[0]) not in self.store.types or len(rest) > 3:
            raise _Refusal(404, "NotFound", "the server could not find the requested resource")
        t = self.store.types[(group, version, rest[0])]
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
                    status = rule.status
                    body = rules.status_body(status, _reason_for(status), f"injected fault on {verb} {resource}")
                    refused = _json_response(status, body)
                    if rule.retry_after is not None:
                        refused.headers["Retry-After"] = str(rule.retry_after)
                    return refused
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
        if verb == "create" and t.namespaced and ("", namespace or "") not in self.store.objects[("", "namespaces")]:
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
        if t.key == ("authorization.k8s.io", "subjectaccessreviews"):
            if verb != "create" or name is not None:
                raise _Refusal(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            return _json_response(201, self._review(await _body(request)))
        if sub == "exec" and t.key == ("", "pods") and name is not None:
            return await self._exec.handle(request, namespace or "", name, self.get_object(api.PODS, namespace, name))
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
            result, gone = self.store.delete(
                t, obj, grace=options.get("gracePeriodSeconds"), policy=options.get("propagationPolicy")
            )
            return _json_response(200 if gone else 202, self._versioned(t, result))
        if verb == "deletecollection":
            options = await _delete_options(request)
            labels = rules.parse_label_selector(query.get("labelSelector"))
            fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
            deleted = []
            for (ns, _), obj in sorted(self.store.objects[t.key].items()):
                if namespace is not None and ns != namespace:
                    continue
                if rules.matches_labels(labels, obj["metadata"].get("labels")) and rules.matches_fields(fields, obj):
                    result, _ = self.store.delete(
                        t, obj, grace=options.get("gracePeriodSeconds"), policy=options.get("propagationPolicy")
                    )
                    deleted.append(self._versioned(t, result))
            return _json_response(
                200,
                {
                    "kind": f"{t.kind}List",
                    "apiVersion": t.api_version,
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": deleted,
                },
            )
        raise _Refusal(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _review(self, body: Any) -> Obj:
        """A SubjectAccessReview's answer: allowed unless ``deny`` covers the resource and verb."""
        attrs = (body.get("spec") or {}).get("resourceAttributes") if isinstance(body, dict) else None
        if not isinstance(attrs, dict):
            raise _Refusal(
                400, "BadRequest", "spec.resourceAttributes: Required value: this test server reviews resources only"
            )
        resource = str(attrs.get("resource", "")) + (f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        verb, namespace = str(attrs.get("verb", "")), attrs.get("namespace") or None
        denied = (resource, verb, namespace) in self._denied or (resource, verb, None) in self._denied
        if denied:
            return {**body, "status": {"allowed": False, "denied": True, "reason": "denied by the kube test server"}}
        return {**body, "status": {"allowed": True, "reason": "allowed by the kube test server (no deny rule)"}}

    def _versioned(self, t: _Type, obj: Obj) -> Obj:
        return dict(obj, apiVersion=t.api_version)

    def _lookup(self, t: _Type, namespace: str | None, name: str) -> Obj:
        obj = self.store.objects[t.key].get((namespace or "", name))
        if obj is None:
            raise _not_found(t, name)
        return obj

    def _validate(self, t: _Type, obj: Obj, name: str) -> None:
        problems = rules.object_problems(
            obj,
            name,
            name_is_label=t.key in (("", "namespaces"), ("batch", "jobs")),
            is_configmap=t.key == ("", "configmaps"),
        )
        validator = (
            schemas.builtin_validator(t.kind, t.api_version, self.kubernetes_version) if t.builtin else t.crd_validator
        )
        if validator is not None and isinstance(obj.get("metadata"), dict):
            if unknown := _unknown_fields(validator, obj):  # strict decoding fails before validation: 400
                version = t.api_version.rsplit("/", 1)[-1]
                fields = ", ".join(f'unknown field "{f}"' for f in unknown)
                message = f'{t.kind} in version "{version}" cannot be handled as a {t.kind}: '
                message += f"strict decoding error: {fields}"
                raise _Refusal(400, "BadRequest", message)
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
        if meta.get("name") and (namespace or "", meta["name"]) in self.store.objects[t.key]:
            raise _Refusal(
                409,
                "AlreadyExists",
                f'{t.plural}{"." + t.group if t.group else ""} "{name}" already exists',
                {"name": name, "group": t.group, "kind": t.plural},
            )
        obj = self.store.insert(t, namespace, body)
        if t.key == ("", "pods"):
            self.kubelet.pod_created(obj)
        elif t.key == ("batch", "jobs"):
            self.kubelet.job_created(obj)
            obj = self.store.objects[t.key][(namespace or "", obj["metadata"]["name"])]
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
        if sub != "status" and (problems := rules.update_problems(t.kind, current, new)):
            raise _invalid(t, name, problems)
        return self.store.replace(t, new)

    def _list(self, t: _Type, namespace: str | None, query: Mapping[str, str]) -> Obj:
        labels = rules.parse_label_selector(query.get("labelSelector"))
        fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
        limit = _int_param(query, "limit")
        list_rv, after = self.store.rv, ""
        if query.get("continue"):
            list_rv, after = rules.decode_continue(query["continue"])
            if list_rv < self.store.compacted_rv:
                raise _Refusal(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                )
        items: list[Obj] = []
        token = None
        for (ns, name), obj in sorted(self.store.objects[t.key].items()):
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
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1", "True")
        watcher = store_mod.Watcher(t.key, t.api_version, namespace, labels, fields, bookmarks)
        # Synchronously, with no await in between: the initial events and the live feed join without a gap.
        initial = self.store.initial_lines(watcher, t, rv_text)
        gone = initial is None
        if initial is not None:
            self.store.watchers.add(watcher)
            self.max_open_watches = max(self.max_open_watches, len(self.store.watchers))
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
            if gone:
                status = rules.status_body(
                    410, "Expired", f"too old resource version: {rv_text} ({self.store.compacted_rv})"
                )
                await response.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())
                return response
            for line in initial or ():
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
            self.store.watchers.discard(watcher)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        t = self.store.kinds[("", "pods")]
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
        if pod.get("status", {}).get("phase", "Pending") == "Pending" and not pod.get("spec", {}).get("nodeName"):
            return web.Response(status=200, text="", content_type="text/plain")  # unscheduled: no kubelet to ask
        if pod.get("status", {}).get("phase", "Pending") == "Pending":
            raise _Refusal(
                400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
            )
        key = (namespace, name, container)
        text = self.kubelet.logs.get(key, "")
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
        sent = len(self.kubelet.logs.get(key, ""))
        try:
            await response.prepare(request)
            if text:
                await response.write(text.encode())
            while not self._closing.is_set():
                signal = self.kubelet.wait_signal(namespace, name)
                current = self.store.objects[t.key].get((namespace, name))
                full = self.kubelet.logs.get(key, "")
                if len(full) > sent:
                    await response.write(full[sent:].encode())
                    sent = len(full)
                    continue
                if current is None or current["metadata"]["uid"] != uid:
                    break
                if current.get("status", {}).get("phase") in kubelet_mod.TERMINAL:
                    break
                await signal.wait()
        except (ConnectionResetError, ConnectionError):
            return response
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response


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
