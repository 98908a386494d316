"""The test server's HTTP face: every request is recorded, authenticated, checked against the
test's denials and faults, then routed to its verb or subresource.

The route table maps a subresource (``log``, ``exec``), or else a verb, to one handler; the
handlers only read the request and hand it to :mod:`._kube_verbs` or :mod:`._kube_streams`.
A bug in a handler is answered with 500 and kept in ``internal_errors`` for the test to see.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from ironflow.testing import _kube_exec as exec_mod
from ironflow.testing import _kube_http as http
from ironflow.testing import _kube_kubelet as kubelet_mod
from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_store as store_mod
from ironflow.testing import _kube_streams as streams
from ironflow.testing import _kube_verbs as verbs

__all__ = ["FaultRule", "Handlers", "RequestRecord", "new_token"]

_REVIEWS: Final = ("authorization.k8s.io", "subjectaccessreviews")
_PODS: Final = ("", "pods")
Handler = Callable[[web.Request, http.Route], Awaitable[web.StreamResponse]]


def new_token() -> str:
    return "kube-test-" + secrets.token_urlsafe(18)


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


class Handlers:
    """Answers every request of one server; the server's test controls change its state."""

    def __init__(
        self,
        store: store_mod.Store,
        kubelet: kubelet_mod.Kubelet,
        execs: exec_mod.ExecService,
        *,
        kubernetes_version: str,
    ) -> None:
        self.store = store
        self.kubelet = kubelet
        self.execs = execs
        self.kubernetes_version = kubernetes_version
        self.token = new_token()
        self.requests: list[RequestRecord] = []
        self.internal_errors: list[Exception] = []
        self.denied: set[verbs.Denial] = set()
        self.faults: list[FaultRule] = []
        self.closing = asyncio.Event()
        self._subresources: dict[str, Handler] = {"log": self._log, "exec": self._exec}
        self._verbs: dict[str, Handler] = {
            "create": self._create,
            "get": self._get,
            "list": self._list,
            "watch": self._watch,
            "update": self._update,
            "patch": self._update,
            "delete": self._delete,
            "deletecollection": self._delete_collection,
        }

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Record, authenticate, deny or fault, then dispatch; every refusal is a Status body."""
        verb, resource, namespace, name = "?", request.path, None, None
        status = 500
        record: RequestRecord | None = None
        try:
            route = http.parse_route(self.store.types, request.path)
            namespace, name = route.namespace, route.name
            verb = http.request_verb(request, name)
            resource = route.t.plural + (f"/{route.sub}" if route.sub else "")
            # Recorded on arrival (status 0 until answered), so open watches are counted too.
            record = RequestRecord(verb, resource, namespace, name, 0, time.monotonic())
            self.requests.append(record)
            self._gate(request, route, verb, resource)
            for rule in self.faults:
                if rule.hit(verb, resource):
                    status = 0 if rule.drop else rule.status
                    return _fault(request, rule, verb, resource)
            response = await self._dispatch(request, route, verb)
            status = response.status
            return response
        except http.Refusal as refusal:
            status = refusal.code
            return http.json_response(refusal.code, refusal.body)
        except rules.InvalidInput as bad:
            status = bad.code
            return http.json_response(bad.code, rules.status_body(bad.code, bad.reason, bad.message))
        except asyncio.CancelledError:
            status = 499  # the client went away (a closed watch or log stream)
            raise
        except Exception as exc:  # a bug in this server: answer 500 and keep it for the test to see
            self.internal_errors.append(exc)
            status = 500
            return http.json_response(500, rules.status_body(500, "InternalError", f"kube test server bug: {exc!r}"))
        finally:
            self._answered(record, RequestRecord(verb, resource, namespace, name, status, time.monotonic()))

    def _gate(self, request: web.Request, route: http.Route, verb: str, resource: str) -> None:
        """Refuse a wrong token (401) and what the test denied (403)."""
        if request.headers.get("Authorization", "") != f"Bearer {self.token}":
            raise http.Refusal(401, "Unauthorized", "Unauthorized")
        if verbs.is_denied(self.denied, resource, verb, route.namespace):
            t, namespace = route.t, route.namespace
            where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
            raise http.Refusal(
                403,
                "Forbidden",
                f'{resource} is forbidden: User "kube-test" cannot {verb} resource "{resource}" '
                f'in API group "{t.group}"{where}',
                {"kind": t.plural, "group": t.group, **({"name": route.name} if route.name else {})},
            )

    def _answered(self, record: RequestRecord | None, final: RequestRecord) -> None:
        if record is None:
            self.requests.append(final)
            return
        for index in range(len(self.requests) - 1, -1, -1):
            if self.requests[index] is record:
                self.requests[index] = dataclasses.replace(final, at=record.at)
                return

    async def _dispatch(self, request: web.Request, route: http.Route, verb: str) -> web.StreamResponse:
        t, namespace, name, sub = route.t, route.namespace, route.name, route.sub
        if verb == "create" and t.namespaced and ("", namespace or "") not in self.store.objects[("", "namespaces")]:
            raise http.Refusal(
                404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"}
            )
        if t.namespaced and namespace is None and name is not None:
            raise http.no_such_resource()
        if t.key == _REVIEWS:
            if verb != "create" or name is not None:
                raise http.method_not_allowed()
            return http.json_response(201, verbs.review(await http.read_body(request), self.denied))
        if sub is not None and sub != "status":
            handler = self._subresources.get(sub)
            if handler is None:
                raise http.no_such_resource()
            return await handler(request, route)
        handler = self._verbs.get(verb)
        if handler is None:
            raise http.method_not_allowed()
        return await handler(request, route)

    # --- subresources ------------------------------------------------------------------

    async def _log(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        if route.t.key != _PODS or request.method != "GET" or route.name is None:
            raise http.method_not_allowed()
        return await streams.log(
            request, self.store, self.kubelet, route.namespace or "", route.name, closing=self.closing
        )

    async def _exec(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        if route.t.key != _PODS or route.name is None:
            raise http.no_such_resource()
        pod = self.store.get(route.t, route.namespace, route.name)
        return await self.execs.handle(request, route.namespace or "", route.name, _copy(pod))

    # --- verbs -------------------------------------------------------------------------

    async def _create(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        body = await http.read_body(request)
        created = verbs.create(
            self.store, self.kubelet, route.t, route.namespace, body, kubernetes_version=self.kubernetes_version
        )
        return http.json_response(201, created)

    async def _get(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        assert route.name is not None
        return http.json_response(200, verbs.versioned(route.t, self._lookup(route, route.name)))

    async def _list(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        return http.json_response(200, verbs.list_objects(self.store, route.t, route.namespace, request.query))

    async def _watch(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        return await streams.watch(request, self.store, route.t, route.namespace, closing=self.closing)

    async def _update(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        assert route.name is not None
        current = self._lookup(route, route.name)
        body = await http.read_body(request)
        content_type = None
        if request.method == "PATCH":
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        updated = verbs.update(
            self.store,
            route.t,
            current,
            body,
            sub=route.sub,
            content_type=content_type,
            kubernetes_version=self.kubernetes_version,
        )
        return http.json_response(200, updated)

    async def _delete(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        assert route.name is not None
        obj = self._lookup(route, route.name)
        result, gone = verbs.delete(self.store, route.t, obj, await http.delete_options(request))
        return http.json_response(200 if gone else 202, result)

    async def _delete_collection(self, request: web.Request, route: http.Route) -> web.StreamResponse:
        options = await http.delete_options(request)
        deleted = verbs.delete_collection(self.store, route.t, route.namespace, request.query, options)
        return http.json_response(200, deleted)

    def _lookup(self, route: http.Route, name: str) -> store_mod.Obj:
        return verbs.lookup(self.store, route.t, route.namespace, name)


def _copy(obj: store_mod.Obj | None) -> store_mod.Obj | None:
    return None if obj is None else copy.deepcopy(obj)


def _fault(request: web.Request, rule: FaultRule, verb: str, resource: str) -> web.StreamResponse:
    """An injected fault's answer: a dropped connection, or its status (and ``Retry-After``)."""
    if rule.drop:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=500)
    body = rules.status_body(rule.status, http.reason_for(rule.status), f"injected fault on {verb} {resource}")
    refused = http.json_response(rule.status, body)
    if rule.retry_after is not None:
        refused.headers["Retry-After"] = str(rule.retry_after)
    return refused
