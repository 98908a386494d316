"""The only user of ``kubernetes_asyncio``: a small async interface over the Kubernetes API.

One generic code path (``ApiClient.call_api`` with raw JSON) serves every resource, built-in
or custom, so there are no typed models to keep in sync. Errors are mapped here, at the
boundary, to :mod:`ironflow.errors` (403, 404, 409, 410, 5xx and network failures), chained
with ``from``; messages carry the verb, the resource and a trimmed API message, never a
request header (so never the bearer token).

Every instance counts its requests by verb and its open watch and log-stream connections, so
benchmarks can assert "at most N requests per step" and "one watch per namespace".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import aiohttp
import yaml

from ironflow import errors
from ironflow.kube.clusters import ClusterConfig, DefaultCluster, InCluster, KubeconfigFile, KubeconfigInline

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s_client

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "JOBS",
    "NAMESPACES",
    "PERSISTENTVOLUMECLAIMS",
    "PODS",
    "ClusterConfig",
    "DefaultCluster",
    "ExecResult",
    "InCluster",
    "KubeApi",
    "KubeObject",
    "KubeconfigFile",
    "KubeconfigInline",
    "ObjectList",
    "RequestCounters",
    "RequestStats",
    "Resource",
    "WatchEvent",
    "backoff_delay",
    "custom_resource",
    "error_for_status",
    "retry_after_delay",
]

#: Raw Kubernetes JSON as the API returns it.
KubeObject: TypeAlias = dict[str, Any]

#: Longest API message copied into an error (a Status body can hold a whole object).
_MESSAGE_LIMIT: Final = 600
#: Times a throttled (429) request is sent again before the error surfaces.
_THROTTLE_RETRIES: Final = 3
#: Writes refuse unknown fields (a real API server's default is to drop them with a warning).
_STRICT: Final = (("fieldValidation", "Strict"),)
#: The server closes each watch after this long (plus jitter by the server); we reconnect.
_WATCH_TIMEOUT_S: Final = 290


# --- resources ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: group ("" for core), version, plural, scope."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of objects of this resource (``v1``, ``batch/v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """The REST path of the collection, or of one object (and its subresource)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS: Final = Resource("", "v1", "pods", "Pod")
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap")
PERSISTENTVOLUMECLAIMS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
EVENTS: Final = Resource("", "v1", "events", "Event")
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
JOBS: Final = Resource("batch", "v1", "jobs", "Job")


def custom_resource(group: str, version: str, plural: str, *, kind: str, namespaced: bool = True) -> Resource:
    """A custom resource (e.g. agent-sandbox's ``extensions.agents.x-k8s.io/v1beta1 sandboxclaims``)."""
    if not group or not version or not plural:
        raise errors.ConfigError("custom_resource needs a group, a version and a plural, e.g. ('x.io', 'v1', 'things')")
    return Resource(group, version, plural, kind, namespaced)


# --- cluster selection -------------------------------------------------------------------


# The selection values are pure and live in k8s/clusters.py; re-exported here.


def _default_kubeconfig_path() -> str | None:
    raw = os.environ.get("KUBECONFIG", "")
    paths = [p for p in raw.split(os.pathsep) if p]
    if paths:
        return raw if any(Path(p).expanduser().exists() for p in paths) else None
    home = Path.home() / ".kube" / "config"
    return str(home) if home.exists() else None


async def _load_configuration(cluster: ClusterConfig) -> k8s_client.Configuration:
    """Turn a :data:`ClusterConfig` into a client configuration; failures say which source failed."""
    # Loaded on connect, not at import: kubernetes_asyncio takes about a second to import,
    # and rendering or configuring a provider must not pay for it.
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    configuration = k8s_client.Configuration()
    try:
        match cluster:
            case DefaultCluster(context=context):
                source = "default config"
                path = _default_kubeconfig_path()
                if path is not None:
                    await k8s_config.load_kube_config(
                        config_file=path, context=context, client_configuration=configuration, persist_config=False
                    )
                elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
                    raise ValueError(
                        "no kubeconfig ($KUBECONFIG or ~/.kube/config) and not inside a pod "
                        "(KUBERNETES_SERVICE_HOST is unset)"
                    )
                else:
                    k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            case InCluster():
                source = "in-cluster config"
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            case KubeconfigFile(path=path, context=context):
                source = f"kubeconfig file {path}"
                await k8s_config.load_kube_config(
                    config_file=path, context=context, client_configuration=configuration, persist_config=False
                )
            case KubeconfigInline(yaml=text, context=context):
                source = "inline kubeconfig"
                data = yaml.safe_load(text)
                if not isinstance(data, dict):
                    raise ValueError("the YAML is not a kubeconfig mapping")
                await k8s_config.load_kube_config_from_dict(data, context=context, client_configuration=configuration)
            case _:
                raise errors.ConfigError(f"unknown cluster config {type(cluster).__name__}")
    except errors.IronflowError:
        raise
    except Exception as exc:  # the loaders raise ConfigException, OSError, YAMLError, KeyError...
        # Only the exception type and its first line: a loader message never holds the token,
        # but a YAML error may quote the document, so trim hard.
        detail = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise errors.KubeClientConfigError(f"failed to create K8s client from {source}: {detail}") from exc
    return configuration


# --- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObjectList:
    """One page of a list: its items, the list's resourceVersion, and the continue token."""

    items: list[KubeObject]
    resource_version: str
    continue_token: str | None = None


@dataclass(frozen=True)
class WatchEvent:
    """A watch event. ``RELISTED`` carries the whole current state in ``items`` (after a 410
    or at the start of a watch without a resourceVersion); ``object`` is then empty.
    ``BOOKMARK`` (from :meth:`KubeApi.watch_stream` only) just moves ``resource_version`` on."""

    type: Literal["ADDED", "MODIFIED", "DELETED", "RELISTED", "BOOKMARK"]
    object: KubeObject
    items: tuple[KubeObject, ...] = ()
    resource_version: str = ""


@dataclass(frozen=True)
class RequestStats:
    """A snapshot of :class:`RequestCounters`."""

    by_verb: Mapping[str, int]
    open_watches: int
    watches_opened: int
    open_streams: int

    @property
    def total(self) -> int:
        """Every request made, watches and log streams included."""
        return sum(self.by_verb.values())


class RequestCounters:
    """Requests by verb and open long-lived connections of one :class:`KubeApi`."""

    def __init__(self) -> None:
        self.by_verb: Counter[str] = Counter()
        self.open_watches = 0
        self.watches_opened = 0
        self.open_streams = 0

    def snapshot(self) -> RequestStats:
        """A frozen copy, for before/after comparisons."""
        return RequestStats(dict(self.by_verb), self.open_watches, self.watches_opened, self.open_streams)

    def reset(self) -> None:
        """Zero the verb counts (open connections stay as they are)."""
        self.by_verb.clear()
        self.watches_opened = 0


# --- errors ------------------------------------------------------------------------------


def _status_message(body: bytes) -> tuple[str, str]:
    """The (reason, message) of a Status body, or ("", trimmed text) when it is not one."""
    text = body.decode(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return "", text.strip()[:_MESSAGE_LIMIT]
    if isinstance(data, dict):
        return str(data.get("reason", "")), str(data.get("message", ""))[:_MESSAGE_LIMIT]
    return "", text.strip()[:_MESSAGE_LIMIT]


def error_for_status(status: int, what: str, *, reason: str = "", message: str = "") -> errors.KubernetesError:
    """The ironflow error for an HTTP status (pure): 403, 404, 409, 410, 5xx and 0 get their own class."""
    cls: type[errors.KubernetesError]
    if status == 403:
        cls = errors.KubeForbidden
    elif status == 404:
        cls = errors.KubeNotFound
    elif status == 409:
        cls = errors.KubeConflict
    elif status == 410:
        cls = errors.KubeGone
    elif status == 0 or status >= 500:
        cls = errors.KubeUnavailable
    else:
        cls = errors.KubernetesError
    label = f"HTTP {status}" if status else "no answer"
    detail = f"{reason}: {message}" if reason and message else (message or reason)
    text = f"{what}: {label}" + (f" ({detail[:_MESSAGE_LIMIT]})" if detail else "")
    return cls(text, status=status, reason=reason)


def backoff_delay(attempt: int, *, base: float = 0.2, cap: float = 5.0) -> float:
    """Seconds to wait before reconnect ``attempt`` (0-based): doubling from ``base``, capped (pure)."""
    return float(min(cap, base * (2 ** max(0, attempt))))


def retry_after_delay(header: str | None, attempt: int) -> float:
    """Seconds to wait after a 429 (pure): the server's ``Retry-After`` seconds, capped at 10,
    else the reconnect backoff for ``attempt``."""
    if header is not None and header.strip().isdigit():
        return float(min(int(header.strip()), 10))
    return backoff_delay(attempt)


def _params(**kwargs: object) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


# --- the client --------------------------------------------------------------------------


class KubeApi:
    """An async Kubernetes client: CRUD, list/watch, logs. Use ``await KubeApi.connect(cluster)``.

    One instance holds one connection pool; share it across steps and close it once.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        host: str,
        request_timeout_s: float = 30.0,
        cluster: ClusterConfig | None = None,
    ) -> None:
        self._client = api_client
        self.host = host
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=10)
        self._cluster = cluster
        self._refreshing = asyncio.Lock()
        self._close_hooks: list[Callable[[], Awaitable[None]]] = []
        self.counters = RequestCounters()

    @classmethod
    async def connect(
        cls, cluster: ClusterConfig | None = None, *, max_connections: int = 128, request_timeout_s: float = 30.0
    ) -> KubeApi:
        """Load the cluster's configuration and open a client; no request is sent yet."""
        cluster = cluster if cluster is not None else DefaultCluster()
        configuration = await _load_configuration(cluster)
        # Watches and log follows each hold a connection for their whole life.
        configuration.connection_pool_maxsize = max_connections
        from kubernetes_asyncio import client as k8s_client  # see _load_configuration

        api_client = k8s_client.ApiClient(configuration=configuration)
        return cls(api_client, host=str(configuration.host), request_timeout_s=request_timeout_s, cluster=cluster)

    async def _refresh_credentials(self, used: object) -> bool:
        """After a 401, load the cluster's credentials again (an exec plugin's short-lived token,
        a rotated token file) and say whether they changed. Concurrent 401s reload once."""
        if self._cluster is None:
            return False
        keys = self._client.configuration.api_key
        async with self._refreshing:
            if keys.get("BearerToken") != used:
                return True  # another request already refreshed it
            try:
                fresh = await _load_configuration(self._cluster)
            except errors.KubeClientConfigError:
                return False
            token = fresh.api_key.get("BearerToken")
            if not token or token == used:
                return False
            keys["BearerToken"] = token
            return True

    def on_close(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook`` when the client closes, before its pool does (informers stop their watches)."""
        self._close_hooks.append(hook)

    async def close(self) -> None:
        """Stop what runs on this client (its informers), then close the connection pool."""
        hooks, self._close_hooks = self._close_hooks, []
        for hook in reversed(hooks):
            await hook()
        await self._client.close()

    async def __aenter__(self) -> KubeApi:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"KubeApi(host={self.host!r})"

    # -- transport --

    async def _open(
        self,
        verb: str,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: object = None,
        content_type: str = "application/json",
        read_timeout: aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        """Send one request and return the open response, raising the mapped error on non-2xx."""
        refreshed, throttled = False, 0
        while True:
            self.counters.by_verb[verb] += 1
            used = self._client.configuration.api_key.get("BearerToken")
            try:
                resp: aiohttp.ClientResponse = await self._client.call_api(
                    path,
                    method,
                    query_params=list(query or []),
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=read_timeout or self._timeout,
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise error_for_status(0, what, message=type(exc).__name__ + _short(exc)) from exc
            # 401 and 429 mean the request was not acted on, so sending it again is safe.
            if resp.status == 401 and not refreshed:
                resp.release()  # an expired token (exec plugin, rotated file): load it again, once
                refreshed = True
                if not await self._refresh_credentials(used):
                    raise error_for_status(
                        401, what, reason="Unauthorized", message="the cluster's credentials were refused"
                    )
                continue
            if resp.status == 429 and throttled < _THROTTLE_RETRIES:
                delay = retry_after_delay(resp.headers.get("Retry-After"), throttled)
                throttled += 1
                resp.release()  # API priority and fairness: wait as told, like client-go
                await asyncio.sleep(delay)
                continue
            break
        if not 200 <= resp.status < 300:
            try:
                raw = await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError):
                raw = b""
            finally:
                resp.release()
            reason, message = _status_message(raw)
            raise error_for_status(resp.status, what, reason=reason or str(resp.reason or ""), message=message)
        return resp

    async def _json(
        self,
        verb: str,
        method: str,
        path: str,
        what: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: object = None,
        content_type: str = "application/json",
    ) -> KubeObject:
        resp = await self._open(verb, method, path, what, query=query, body=body, content_type=content_type)
        raw = await _read_all(resp, what)
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise errors.KubernetesError(f"{what}: the API answered with invalid JSON", status=resp.status) from exc
        if not isinstance(data, dict):
            raise errors.KubernetesError(f"{what}: the API answered with a non-object", status=resp.status)
        return data

    # -- verbs --

    async def create(self, resource: Resource, namespace: str | None, body: Mapping[str, Any]) -> KubeObject:
        """Create an object; 409 (``KubeConflict``) when the name is taken, 422 when it is invalid,
        400 for an unknown field (writes ask for strict field validation, so a typo fails loudly
        instead of being dropped)."""
        name = body.get("metadata", {}).get("name") or body.get("metadata", {}).get("generateName", "") + "*"
        what = f"create {resource.plural} {_where(namespace, name)}"
        return await self._json("create", "POST", resource.path(namespace), what, query=list(_STRICT), body=dict(body))

    async def get(self, resource: Resource, namespace: str | None, name: str) -> KubeObject:
        """Read one object; ``KubeNotFound`` when it does not exist."""
        what = f"get {resource.plural} {_where(namespace, name)}"
        return await self._json("get", "GET", resource.path(namespace, name), what)

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ObjectList:
        """One page of a list (``namespace=None`` lists across namespaces)."""
        what = f"list {resource.plural} {_where(namespace, None)}"
        query = _params(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=limit,
            resourceVersion=resource_version,
            **{"continue": continue_token},
        )
        data = await self._json("list", "GET", resource.path(namespace), what, query=query)
        meta = data.get("metadata") or {}
        items = data.get("items") or []
        for item in items:  # list items carry no kind/apiVersion on the wire
            item.setdefault("kind", resource.kind)
            item.setdefault("apiVersion", resource.api_version)
        return ObjectList(items, str(meta.get("resourceVersion", "")), meta.get("continue") or None)

    async def list_all(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """Every page of a list, following continue tokens; the resourceVersion is the first page's."""
        items: list[KubeObject] = []
        token: str | None = None
        first_rv = ""
        while True:
            page = await self.list(
                resource,
                namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
            )
            items.extend(page.items)
            first_rv = first_rv or page.resource_version
            token = page.continue_token
            if not token:
                return ObjectList(items, first_rv, None)

    async def patch(self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """JSON merge-patch an object (RFC 7386: ``None`` removes a key)."""
        what = f"patch {resource.plural} {_where(namespace, name)}"
        return await self._json(
            "patch",
            "PATCH",
            resource.path(namespace, name),
            what,
            query=list(_STRICT),
            body=dict(patch),
            content_type="application/merge-patch+json",
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
    ) -> KubeObject:
        """Delete an object; returns it (with ``deletionTimestamp`` while finalizers or grace hold it,
        or a Status once gone). ``KubeNotFound`` when it was already gone."""
        what = f"delete {resource.plural} {_where(namespace, name)}"
        query = _params(gracePeriodSeconds=grace_period_seconds, propagationPolicy=propagation_policy)
        return await self._json("delete", "DELETE", resource.path(namespace, name), what, query=query)

    async def delete_collection(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
    ) -> KubeObject:
        """Delete every object of a namespace matching the selectors in one request."""
        what = f"deletecollection {resource.plural} {_where(namespace, None)}"
        query = _params(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            gracePeriodSeconds=grace_period_seconds,
            propagationPolicy=propagation_policy,
        )
        return await self._json("deletecollection", "DELETE", resource.path(namespace), what, query=query)

    # -- watch --

    async def watch_stream(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = _WATCH_TIMEOUT_S,
    ) -> AsyncGenerator[WatchEvent, None]:
        """One watch connection: its events until the server closes it. ``KubeGone`` on 410."""
        what = f"watch {resource.plural} {_where(namespace, None)}"
        query = _params(
            watch="true",
            resourceVersion=resource_version,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=timeout_seconds,
            allowWatchBookmarks="true",  # a quiet watch's resourceVersion stays fresh: fewer 410s
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_seconds + 30)
        resp = await self._open("watch", "GET", resource.path(namespace), what, query=query, read_timeout=timeout)
        self.counters.open_watches += 1
        self.counters.watches_opened += 1
        try:
            async for line in _lines(resp, what):
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:  # a torn stream: reconnecting from the last version is safe
                    raise error_for_status(0, what, message="the watch stream sent an unreadable event") from exc
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    status = int(obj.get("code", 500))
                    raise error_for_status(
                        status,
                        what,
                        reason=str(obj.get("reason", "")),
                        message=str(obj.get("message", ""))[:_MESSAGE_LIMIT],
                    )
                rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
                yield WatchEvent(kind, {} if kind == "BOOKMARK" else obj, resource_version=rv)
        finally:
            self.counters.open_watches -= 1
            resp.release()

    async def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        relist_on_gone: bool = True,
        max_retries: int = 5,
        timeout_seconds: int = _WATCH_TIMEOUT_S,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Watch forever: reconnect from the last resourceVersion when a connection ends, with backoff
        after failures (``max_retries`` in a row, then the error); on 410 Gone list again and yield a
        ``RELISTED`` event. Without ``resource_version`` it starts with a list (a ``RELISTED`` event)."""
        rv = resource_version
        failures = 0
        quick_ends = 0
        loop = asyncio.get_running_loop()
        while True:
            try:
                if rv is None:
                    listed = await self.list_all(
                        resource, namespace, label_selector=label_selector, field_selector=field_selector
                    )
                    rv = listed.resource_version
                    yield WatchEvent("RELISTED", {}, tuple(listed.items), rv)
                started, seen = loop.time(), 0
                stream = self.watch_stream(
                    resource,
                    namespace,
                    resource_version=rv,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    timeout_seconds=timeout_seconds,
                )
                async with contextlib.aclosing(stream) as events:
                    async for event in events:
                        failures = quick_ends = 0
                        seen += 1
                        rv = event.resource_version or rv
                        if event.type != "BOOKMARK":  # bookmarks only move rv on
                            yield event
                failures = 0  # a clean end (the server's timeout): reconnect at once...
                if not seen and loop.time() - started < 1.0:
                    # ...unless the server keeps closing at once: then pace the reconnects.
                    await asyncio.sleep(backoff_delay(quick_ends))
                    quick_ends += 1
            except errors.KubeGone:
                if not relist_on_gone:
                    raise
                rv = None
            except errors.KubeUnavailable:
                if failures >= max_retries:
                    raise
                await asyncio.sleep(backoff_delay(failures))
                failures += 1

    # -- logs --

    async def read_log(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        *,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        """The pod's whole log (stdout and stderr merged by the kubelet)."""
        what = f"read log of pods {_where(namespace, pod)}"
        query = _params(container=container, tailLines=tail_lines, limitBytes=limit_bytes)
        resp = await self._open("log", "GET", PODS.path(namespace, pod, "log"), what, query=query)
        return (await _read_all(resp, what)).decode(errors="replace")

    async def follow_log(self, namespace: str, pod: str, container: str | None = None) -> AsyncGenerator[str, None]:
        """The pod's log lines (without the newline) as they are written, until the container ends."""
        what = f"follow log of pods {_where(namespace, pod)}"
        query = _params(container=container, follow="true")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        resp = await self._open("log", "GET", PODS.path(namespace, pod, "log"), what, query=query, read_timeout=timeout)
        self.counters.open_streams += 1
        try:
            async for line in _lines(resp, what):
                yield line.decode(errors="replace")
        finally:
            self.counters.open_streams -= 1
            resp.release()

    # -- exec (added for agent-sandbox: run the step in a running sandbox pod) --

    async def exec(
        self,
        namespace: str,
        pod: str,
        command: tuple[str, ...],
        *,
        container: str | None = None,
        stdin: bytes | None = None,
        max_output_bytes: int = 64 * 1024 * 1024,
        on_output: Callable[[int, bytes], None] | None = None,
    ) -> ExecResult:
        """Run ``command`` in a container of a running pod (pods/exec over a websocket,
        ``v4.channel.k8s.io``) and return its exit code, stdout and stderr.

        ``stdin`` is sent in full right after the connection opens; v4 cannot signal its end,
        so the command must read a known length (``head -c N``), never wait for EOF. Output
        beyond ``max_output_bytes`` per stream is dropped (``truncated``); ``on_output(stream, chunk)``
        sees every chunk as it arrives (1 stdout, 2 stderr), kept or not. Bound the call with
        ``asyncio.timeout``: a cancelled exec closes the connection. Errors map like every call
        (404 pod gone, 403 denied, ``KubeUnavailable`` when the connection breaks).
        """
        from kubernetes_asyncio.stream import WsApiClient

        what = f"exec in pods {_where(namespace, pod)}"
        self.counters.by_verb["exec"] += 1
        query: list[tuple[str, Any]] = [("command", list(command))]
        query += _params(container=container, stdin=stdin is not None, stdout=True, stderr=True, tty=False)
        out = {1: bytearray(), 2: bytearray()}
        truncated = False
        status: dict[str, Any] | None = None
        async with WsApiClient(configuration=self._client.configuration) as ws_client:
            try:
                connecting = await ws_client.call_api(
                    PODS.path(namespace, pod, "exec"),
                    "GET",
                    query_params=query,
                    header_params={"Accept": "*/*"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                )
                async with connecting as ws:
                    if stdin:
                        for start in range(0, len(stdin), 256 * 1024):
                            await ws.send_bytes(b"\x00" + stdin[start : start + 256 * 1024])
                    async for message in ws:
                        if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                            break
                        data = message.data if isinstance(message.data, bytes) else str(message.data).encode()
                        if not data:
                            continue
                        channel, payload = data[0], data[1:]
                        if channel in out and on_output is not None:
                            on_output(channel, payload)
                        if channel in out:
                            room = max_output_bytes - len(out[channel])
                            truncated = truncated or len(payload) > room
                            out[channel] += payload[: max(room, 0)]
                        elif channel == 3 and payload:
                            status = json.loads(payload)
            except aiohttp.WSServerHandshakeError as exc:
                raise error_for_status(exc.status, what, message=str(exc.message)[:_MESSAGE_LIMIT]) from exc
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise error_for_status(0, what, message=type(exc).__name__ + _short(exc)) from exc
        if status is None:
            raise error_for_status(0, what, message="the connection closed without an exit status")
        return ExecResult(_exit_code(status), bytes(out[1]), bytes(out[2]), truncated=truncated)


@dataclass(frozen=True)
class ExecResult:
    """What :meth:`KubeApi.exec` returns: the command's exit code and its two output streams."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False


def _exit_code(status: Mapping[str, Any]) -> int:
    """The exit code in an exec's v4 error-channel Status (pure): 0 on Success, the ExitCode cause else."""
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or ():
        if isinstance(cause, Mapping) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except ValueError:
                break
    raise errors.KubernetesError(f"exec failed: {str(status.get('message', ''))[:_MESSAGE_LIMIT]}", status=500)


def _where(namespace: str | None, name: str | None) -> str:
    ns = namespace if namespace is not None else "(all namespaces)"
    return f"{ns}/{name}" if name else ns


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f": {text}" if text else ""


async def _read_all(resp: aiohttp.ClientResponse, what: str) -> bytes:
    """The whole body of an answer, then the connection back to the pool."""
    try:
        return await resp.read()
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise error_for_status(0, what, message="connection lost reading the answer" + _short(exc)) from exc
    finally:
        resp.release()


async def _lines(resp: aiohttp.ClientResponse, what: str) -> AsyncIterator[bytes]:
    """Split a streamed body into lines of any length (aiohttp's readline caps line length)."""
    buffer = bytearray()
    try:
        while True:
            chunk = await resp.content.readany()
            if not chunk:
                break
            start = len(buffer)
            buffer += chunk
            while (cut := buffer.find(b"\n", start)) >= 0:
                line = bytes(buffer[:cut])
                del buffer[: cut + 1]
                start = 0
                yield line.rstrip(b"\r")
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise error_for_status(0, what, message="stream interrupted" + _short(exc)) from exc
    if buffer:
        yield bytes(buffer)
