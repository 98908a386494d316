"""The only user of ``kubernetes_asyncio``: a small async interface over the Kubernetes API.

:class:`KubeApi` is the client facade: connecting (cluster configuration loaded here),
CRUD, list and watch, logs and exec. Its parts live by job: the values and resources in
:mod:`~ironflow.kube.resources`, the mapping of answers to errors in
:mod:`~ironflow.kube.responses` (both pure), one request in :mod:`~ironflow.kube.transport`,
reading bodies in :mod:`~ironflow.kube.reading`, the endless watch in
:mod:`~ironflow.kube.watching`. The names callers use are re-exported here, so a caller
imports this one module.

Errors are mapped at the boundary to :mod:`ironflow.errors` (403, 404, 409, 410, 5xx and
network failures), chained with ``from``; messages carry the verb, the resource and a
trimmed API message, never a request header (so never the bearer token). Every instance
counts its requests by verb and its open watch and log-stream connections, so benchmarks
can assert "at most N requests per step" and "one watch per namespace".
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

import aiohttp

from ironflow import errors
from ironflow.kube import exec_frames, kubeconfigs, owners, reading, responses, transport, watching
from ironflow.kube.clusters import ClusterConfig, DefaultCluster, InCluster, KubeconfigFile, KubeconfigInline
from ironflow.kube.resources import (
    CONFIGMAPS,
    EVENTS,
    JOBS,
    NAMESPACES,
    PERSISTENTVOLUMECLAIMS,
    PODS,
    SECRETS,
    ExecResult,
    KubeObject,
    ObjectList,
    RequestCounters,
    RequestStats,
    Resource,
    WatchEvent,
    custom_resource,
)
from ironflow.kube.responses import backoff_delay, error_for_status, retry_after_delay

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s_client

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "JOBS",
    "NAMESPACES",
    "PERSISTENTVOLUMECLAIMS",
    "PODS",
    "SECRETS",
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

#: Writes refuse unknown fields (a real API server's default is to drop them with a warning).
_STRICT: Final = (("fieldValidation", "Strict"),)
#: The server closes each watch after this long (plus jitter by the server); we reconnect.
_WATCH_TIMEOUT_S: Final = 290


# --- cluster selection: the values are kube/clusters.py's --------------------------------


async def _load_configuration(cluster: ClusterConfig) -> k8s_client.Configuration:
    """Turn a :data:`ClusterConfig` into a client configuration; failures say which source failed."""
    # Loaded on connect, not at import (a second's import rendering a provider must not pay).
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    # Its files of inline data (a private key among them) in memory, not in /tmp: see kubeconfigs.
    k8s_config.kube_config.FileOrData._create_temp_file_with_content = staticmethod(kubeconfigs.in_memory_file)  # type: ignore[method-assign,assignment]
    configuration = k8s_client.Configuration()
    try:
        match cluster:
            case DefaultCluster(context=context):
                source = "default config"
                path = kubeconfigs.default_path()
                if path is not None:
                    kubeconfigs.check_files(path)
                    await k8s_config.load_kube_config(
                        config_file=path, context=context, client_configuration=configuration, persist_config=False
                    )
                elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
                    named = os.environ.get("KUBECONFIG", "")
                    where = f"$KUBECONFIG={named} names no file that exists" if named else "no ~/.kube/config"
                    raise ValueError(f"{where}, and not inside a pod (KUBERNETES_SERVICE_HOST is unset)")
                else:
                    k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            case InCluster():
                source = "in-cluster config"
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            case KubeconfigFile(path=path, context=context):
                source = f"kubeconfig file {path}"
                kubeconfigs.check_files(path)
                await k8s_config.load_kube_config(
                    config_file=path, context=context, client_configuration=configuration, persist_config=False
                )
            case KubeconfigInline(yaml=text, context=context):
                source = "inline kubeconfig"
                data = kubeconfigs.value(text)
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
        owner: owners.WorkerOwner | None = None,
    ) -> None:
        self._client = api_client
        self.host = host
        self._cluster = cluster
        #: The worker pod what this client creates is bound to (:func:`owners.stamp`); None outside a cluster.
        self.owner = owner
        self._close_hooks: list[Callable[[], Awaitable[None]]] = []
        self.counters = RequestCounters()
        self._transport = transport.Transport(
            api_client, counters=self.counters, request_timeout_s=request_timeout_s, fresh_token=self._fresh_token
        )

    @classmethod
    async def connect(
        cls, cluster: ClusterConfig | None = None, *, max_connections: int = 128, request_timeout_s: float = 30.0
    ) -> KubeApi:
        """Load the cluster's configuration and open a client; no request is sent yet. In a worker pod
        (downward-API ``IRONFLOW_WORKER_POD_*`` set; ``ConfigError`` if only some are) what it creates is
        bound to that pod."""
        owner = owners.owner_from_env(os.environ)
        cluster = cluster if cluster is not None else DefaultCluster()
        configuration = await _load_configuration(cluster)
        # Watches and log follows each hold a connection for their whole life.
        configuration.connection_pool_maxsize = max_connections
        from kubernetes_asyncio import client as k8s_client  # see _load_configuration

        api_client = k8s_client.ApiClient(configuration=configuration)
        host = str(configuration.host)
        return cls(api_client, host=host, request_timeout_s=request_timeout_s, cluster=cluster, owner=owner)

    async def _fresh_token(self) -> str | None:
        """The cluster's bearer token loaded again (an exec plugin's, a rotated file's), or None."""
        if self._cluster is None:
            return None
        try:
            fresh = await _load_configuration(self._cluster)
        except errors.KubeClientConfigError:
            return None
        token = fresh.api_key.get("BearerToken")
        return str(token) if token else None

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

    # -- verbs --

    async def create(self, resource: Resource, namespace: str | None, body: Mapping[str, Any]) -> KubeObject:
        """Create an object; 409 (``KubeConflict``) when the name is taken, 422 when it is invalid,
        400 for an unknown field (writes ask for strict field validation, so a typo fails loudly
        instead of being dropped). A managed object is bound to this client's worker pod (:func:`owners.stamp`)."""
        body = owners.stamp(body, namespace, self.owner)
        name = body.get("metadata", {}).get("name") or body.get("metadata", {}).get("generateName", "") + "*"
        what = f"create {resource.plural} {responses.where(namespace, name)}"
        return await self._transport.json(
            "create", "POST", resource.path(namespace), what, query=list(_STRICT), body=dict(body)
        )

    async def get(
        self, resource: Resource, namespace: str | None, name: str, *, subresource: str | None = None
    ) -> KubeObject:
        """Read one object (or its ``subresource``, e.g. ``scale``); ``KubeNotFound`` when it does not exist."""
        what = f"get {resource.plural} {responses.where(namespace, name, subresource)}"
        return await self._transport.json("get", "GET", resource.path(namespace, name, subresource), what)

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
        what = f"list {resource.plural} {responses.where(namespace, None)}"
        query = responses.params(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=limit,
            resourceVersion=resource_version,
            **{"continue": continue_token},
        )
        data = await self._transport.json("list", "GET", resource.path(namespace), what, query=query)
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

    async def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        apply_as: str | None = None,
    ) -> KubeObject:
        """JSON merge-patch an object or its ``subresource`` (RFC 7386: ``None`` removes a key); with
        ``apply_as`` (a field manager), a server-side apply of the whole object ``patch``, forced."""
        what = f"patch {resource.plural} {responses.where(namespace, name, subresource)}"
        query = [*_STRICT, ("fieldManager", apply_as), ("force", "true")] if apply_as else list(_STRICT)
        kind = "application/apply-patch+yaml" if apply_as else "application/merge-patch+json"  # JSON is YAML
        path = resource.path(namespace, name, subresource)
        return await self._transport.json(
            "patch", "PATCH", path, what, query=query, body=dict(patch), content_type=kind
        )

    async def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        uid: str | None = None,
    ) -> KubeObject:
        """Delete an object; returns it (with ``deletionTimestamp`` while finalizers or grace hold it,
        or a Status once gone). ``KubeNotFound`` when it was already gone; with ``uid`` only that object
        (a precondition): ``KubeConflict`` when its name is a new object's (deleted and made again)."""
        what = f"delete {resource.plural} {responses.where(namespace, name)}"
        query, body = responses.delete_options(uid, grace_period_seconds, propagation_policy)
        path = resource.path(namespace, name)
        return await self._transport.json("delete", "DELETE", path, what, query=query, body=body)

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
        what = f"deletecollection {resource.plural} {responses.where(namespace, None)}"
        selectors = responses.params(labelSelector=label_selector, fieldSelector=field_selector)
        query = selectors + responses.params(
            gracePeriodSeconds=grace_period_seconds, propagationPolicy=propagation_policy
        )
        return await self._transport.json("deletecollection", "DELETE", resource.path(namespace), what, query=query)

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
        what = f"watch {resource.plural} {responses.where(namespace, None)}"
        query = responses.params(
            watch="true",
            resourceVersion=resource_version,
            labelSelector=label_selector,
            fieldSelector=field_selector,
            timeoutSeconds=timeout_seconds,
            allowWatchBookmarks="true",  # a quiet watch's resourceVersion stays fresh: fewer 410s
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_seconds + 30)
        resp = await self._transport.open(
            "watch", "GET", resource.path(namespace), what, query=query, read_timeout=timeout
        )
        self.counters.open_watches += 1
        self.counters.watches_opened += 1
        try:
            async for line in reading.lines(resp, what):
                event = responses.watch_event(line, what)
                if event is not None:
                    yield event
        finally:
            self.counters.open_watches -= 1
            reading.release_stream(resp)

    def watch(
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
        return watching.reconnecting(
            self,
            resource,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            relist_on_gone=relist_on_gone,
            max_retries=max_retries,
            timeout_seconds=timeout_seconds,
        )

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
        what = f"read log of pods {responses.where(namespace, pod)}"
        query = responses.params(container=container, tailLines=tail_lines, limitBytes=limit_bytes)
        resp = await self._transport.open("log", "GET", PODS.path(namespace, pod, "log"), what, query=query)
        return (await reading.read_all(resp, what)).decode(errors="replace")

    async def follow_log(self, namespace: str, pod: str, container: str | None = None) -> AsyncGenerator[str, None]:
        """The pod's log lines (without the newline) as they are written, until the container ends (cut at 16 MiB)."""
        what = f"follow log of pods {responses.where(namespace, pod)}"
        query = responses.params(container=container, follow="true")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        resp = await self._transport.open(
            "log", "GET", PODS.path(namespace, pod, "log"), what, query=query, read_timeout=timeout
        )
        self.counters.open_streams += 1
        try:
            async for line in reading.lines(resp, what, max_line=reading.MAX_LOG_LINE_BYTES):
                yield line.decode(errors="replace")
        finally:
            self.counters.open_streams -= 1
            reading.release_stream(resp)

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
        more_stdin: AsyncIterator[bytes] | None = None,
    ) -> ExecResult:
        """Run ``command`` in a container of a running pod (pods/exec over a websocket,
        ``v4.channel.k8s.io``) and return its exit code, stdout and stderr.

        ``stdin`` is sent in full right after the connection opens; v4 cannot signal its end,
        so the command must read a known length (``head -c N``), never wait for EOF; and read all
        of it: a command that ends with some unread may lose its answer (kube-apiserver with kwok
        closed the stream without the output or the exit status in most runs with 1 MiB unread). Output
        beyond ``max_output_bytes`` per stream is dropped (``truncated``); ``on_output(stream, chunk)``
        sees every chunk as it arrives (1 stdout, 2 stderr), kept or not; ``more_stdin``, after
        ``stdin``, is sent piece by piece as it comes while the output is read. Bound the call with
        ``asyncio.timeout``: a cancelled exec closes the connection. Errors map like every call
        (404 pod gone, 403 denied, ``KubeUnavailable`` when the connection breaks).
        """
        from kubernetes_asyncio.stream import WsApiClient

        what = f"exec in pods {responses.where(namespace, pod)}"
        self.counters.by_verb["exec"] += 1
        query: list[tuple[str, Any]] = [("command", list(command))]
        wants_stdin = stdin is not None or more_stdin is not None
        query += responses.params(container=container, stdin=wants_stdin, stdout=True, stderr=True, tty=False)
        output = responses.ExecOutput(max_output_bytes, on_output)
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
                    await exec_frames.exchange(ws, output, stdin, more_stdin)
            except aiohttp.WSServerHandshakeError as exc:
                raise error_for_status(exc.status, what, message=str(exc.message)[: responses.MESSAGE_LIMIT]) from exc
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                raise error_for_status(0, what, message=type(exc).__name__ + responses.short(exc)) from exc
        return output.result(what)
