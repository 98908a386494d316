"""Where a sandbox's runtime answers in the cluster, for the in-cluster Sandbox Router (I/O at the edges).

:class:`ClusterRoutes` is the cluster's :class:`~ironflow.sessions.routes.RuntimeRoutes`. A
router target names a Sandbox (what agent-sandbox's SDK creates through a claim, an ironflow
warm pool's member included) or an ironflow session pod; :func:`judge` decides, from the objects
alone, whether it may be routed to:

=========================================================  ======================================
the target                                                 answer
=========================================================  ======================================
a namespace the router was not given                       403
a Sandbox whose pod is not controlled by that Sandbox      403 (a pod named in its annotation
                                                           that another object owns)
no Sandbox, and a pod that is no ironflow session pod      403: never routed, whatever it runs
neither a Sandbox nor a pod of that name                   404
a pod not Running and Ready, or being deleted, or no IP    503
a pod-IP hint that is not the pod's                        403 (the hint never picks the address)
the runtime's port, on a pod that declares no runtime      502
=========================================================  ======================================

On the runtime's port the router puts a token of its own on the request: made here on the first
request for a pod (keyed by its uid, so a new pod of the same name gets a new one), delivered
with one ``pods/exec`` into the runtime's FIFO (:mod:`ironflow.k8s.sessions.runtime_pod`), never
written to an API object or a log. Other ports (a server the sandbox runs) get no token. Objects
are read on each request; tokens are kept until :meth:`ClusterRoutes.forget`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Collection, Mapping
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import claims
from ironflow.k8s.sessions import runtime_link, runtime_pod
from ironflow.kube import api as kube
from ironflow.kube import pod_status
from ironflow.secrets import Secret
from ironflow.sessions.routes import NotRoutable, Route, RouteTarget

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "ClusterRoutes", "judge"]

#: The upload limit a router-delivered first line sets (a session opener's line sets its own).
DEFAULT_MAX_UPLOAD_BYTES: Final = 1 << 30


def _owned_by(pod: Mapping[str, Any], sandbox: Mapping[str, Any]) -> bool:
    uid = (sandbox.get("metadata") or {}).get("uid")
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return bool(uid) and any(r.get("kind") == "Sandbox" and r.get("uid") == uid and r.get("controller") for r in refs)


def _session_pod(pod: Mapping[str, Any]) -> bool:
    found = (pod.get("metadata") or {}).get("labels") or {}
    return (
        found.get(labels.LABEL_MANAGED_BY) == labels.MANAGED_BY_VALUE
        and found.get(labels.LABEL_COMPONENT) == labels.COMPONENT_SANDBOX_SESSION
    )


def judge(target: RouteTarget, sandbox: Mapping[str, Any] | None, pod: Mapping[str, Any] | None) -> str:
    """The address (``host``) to route ``target`` to, given its Sandbox (None: there is none) and
    the pod found for it (pure; see the module's table).

    Raises:
        NotRoutable: with the table's status.
    """
    where = f"{target.namespace}/{target.name}"
    if pod is None:
        raise NotRoutable(f"no sandbox {where}", 404)
    if sandbox is not None and not _owned_by(pod, sandbox):
        raise NotRoutable(f"pod {pod['metadata'].get('name')} is not the pod of sandbox {where}")
    if sandbox is None and not _session_pod(pod):
        raise NotRoutable(f"{where} is not a sandbox: the router reaches sandboxes only")
    status = pod.get("status") or {}
    ip = status.get("podIP")
    ready = status.get("phase") == "Running" and pod_status.pod_ready(pod)
    if not ip or not ready or (pod.get("metadata") or {}).get("deletionTimestamp"):
        raise NotRoutable(f"sandbox {where} is not ready", 503)
    known = {str(ip), *(str(p.get("ip")) for p in status.get("podIPs") or () if isinstance(p, Mapping))}
    if target.pod_ip is not None and target.pod_ip not in known:
        raise NotRoutable(f"{target.pod_ip} is not the address of sandbox {where}")
    return str(ip)


class ClusterRoutes:
    """Routes to sandboxes of ``namespaces`` (None: every namespace the router's RBAC reads).

    Args:
        api: the cluster's client (the router's service account: get sandboxes and pods,
            create pods/exec).
        python: the image's Python, which the token delivery runs.
    """

    def __init__(
        self, api: kube.KubeApi, *, namespaces: Collection[str] | None = None, python: str = "python3"
    ) -> None:
        self.api, self.python = api, python
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self.resources = claims.resources()
        self._tokens: dict[tuple[str, str], Secret] = {}  # (namespace, pod uid) -> the router's token
        self._keys: dict[tuple[str, str], tuple[str, str]] = {}  # (namespace, target name) -> its pod's key
        self._delivering: dict[tuple[str, str], asyncio.Lock] = {}

    async def route(self, target: RouteTarget) -> Route:
        if self.namespaces is not None and target.namespace not in self.namespaces:
            raise NotRoutable(f"namespace {target.namespace} is not one this router serves")
        sandbox = await self._get(self.resources.sandboxes, target.namespace, target.name)
        pod_name = target.name
        if sandbox is not None:
            annotations = sandbox.get("metadata", {}).get("annotations") or {}
            pod_name = str(annotations.get(labels.ANNOTATION_SANDBOX_POD_NAME) or target.name)
        pod = await self._get(kube.PODS, target.namespace, pod_name)
        ip = judge(target, sandbox, pod)
        assert pod is not None  # judge refuses a missing pod
        host = f"[{ip}]" if ":" in ip else ip
        base = f"http://{host}:{target.port}"
        if target.port != runtime_pod.PORT:
            return Route(base)
        self._keys[(target.namespace, target.name)] = (target.namespace, str(pod["metadata"].get("uid")))
        return Route(base, await self._token(target.namespace, pod))

    def forget(self, target: RouteTarget) -> None:
        key = self._keys.pop((target.namespace, target.name), None)
        if key is not None:
            self._tokens.pop(key, None)  # delivered anew on the next request

    async def aclose(self) -> None:
        self._tokens.clear()

    async def _get(self, resource: kube.Resource, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get(resource, namespace, name)
        except errors.KubeNotFound:
            return None

    async def _token(self, namespace: str, pod: Mapping[str, Any]) -> Secret:
        """The router's token for the pod's runtime, delivered on the first request for it."""
        meta = pod["metadata"]
        key = (namespace, str(meta.get("uid")))
        lock = self._delivering.setdefault(key, asyncio.Lock())
        async with lock:  # one delivery per pod, however many requests ask at once
            known = self._tokens.get(key)
            if known is not None:
                return known
            where = f"sandbox {namespace}/{meta.get('name')}"
            container = str(pod["spec"]["containers"][0]["name"])
            address = runtime_pod.address_of(pod, container)
            if address is None:
                raise NotRoutable(f"{where} runs no session runtime", 502)
            token = Secret(secrets.token_urlsafe(32))
            line = runtime_pod.token_line(
                token.reveal(), workspace=None, idle_timeout=None, max_upload_bytes=DEFAULT_MAX_UPLOAD_BYTES
            )
            command = runtime_pod.delivery_command(len(line), python=self.python)
            result = await self.api.exec(namespace, str(meta["name"]), command, container=container, stdin=line)
            if runtime_pod.delivered(result.stdout) is not True:
                raise NotRoutable(
                    f"sandbox {namespace}/{meta.get('name')} took no token: its runtime is not running", 502
                )
            # The runtime reads its FIFO on a thread of its own: a POST right now could meet its 503.
            if await runtime_link.RuntimeLink(f"http://{address}", token).admitted() != 200:
                raise NotRoutable(f"{where} did not take the router's token", 502)
            self._tokens[key] = token
        self._delivering.pop(key, None)
        return token
