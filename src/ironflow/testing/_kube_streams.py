"""The test server's streaming answers: watches (events as they happen) and followed pod logs.

A stream ends when the client leaves, its timeout passes, the server stops (``closing``), or,
for a log, when the pod is gone, replaced or finished. A watch from an expired resourceVersion
gets one ``ERROR`` event with a 410 Status, as from a real API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import web

from ironflow.testing import _kube_kubelet as kubelet_mod
from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_store as store_mod
from ironflow.testing import _kube_verbs as verbs
from ironflow.testing._kube_http import Refusal, int_param, is_true

__all__ = ["log", "watch"]


async def watch(
    request: web.Request, store: store_mod.Store, t: store_mod.Type, namespace: str | None, *, closing: asyncio.Event
) -> web.StreamResponse:
    """Stream the watch events of ``t`` (in ``namespace``, or all) that the query's selectors match."""
    query = request.query
    labels = rules.parse_label_selector(query.get("labelSelector"))
    fields = rules.parse_field_selector(query.get("fieldSelector"), t.plural)
    timeout = int_param(query, "timeoutSeconds") or 1800
    rv_text = query.get("resourceVersion", "")
    if rv_text not in ("", "0") and not rv_text.isdigit():
        raise Refusal(400, "BadRequest", f'invalid resource version "{rv_text}"')
    watcher = store_mod.Watcher(t.key, t.api_version, namespace, labels, fields, is_true(query, "allowWatchBookmarks"))
    # Synchronously, with no await in between: the initial events and the live feed join without a gap.
    initial = store.initial_lines(watcher, t, rv_text)
    if initial is not None:
        store.open_watch(watcher)
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        if initial is None:
            status = rules.status_body(410, "Expired", f"too old resource version: {rv_text} ({store.compacted_rv})")
            await response.write((json.dumps({"type": "ERROR", "object": status}) + "\n").encode())
            return response
        for line in initial:
            await response.write(line.encode())
        await _feed(response, watcher, closing, lifetime_s=timeout)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        store.watchers.discard(watcher)
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


async def _feed(
    response: web.StreamResponse, watcher: store_mod.Watcher, closing: asyncio.Event, *, lifetime_s: int
) -> None:
    """Send the live events until the watch's lifetime passes, the feed ends or the server stops."""
    deadline = asyncio.get_running_loop().time() + lifetime_s
    while not closing.is_set():
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return
        try:
            line_or_end = await asyncio.wait_for(watcher.queue.get(), remaining)
        except TimeoutError:
            return
        if line_or_end is None:
            return
        await response.write(line_or_end.encode())


async def log(
    request: web.Request,
    store: store_mod.Store,
    kubelet: kubelet_mod.Kubelet,
    namespace: str,
    name: str,
    *,
    closing: asyncio.Event,
) -> web.StreamResponse:
    """A container's log (``tailLines``, ``limitBytes``), followed while the pod runs when ``follow``."""
    t = store.kinds[("", "pods")]
    pod = verbs.lookup(store, t, namespace, name)
    container = _container(pod, name, request.query.get("container"))
    if pod.get("status", {}).get("phase", "Pending") == "Pending" and not pod.get("spec", {}).get("nodeName"):
        return web.Response(status=200, text="", content_type="text/plain")  # unscheduled: no kubelet to ask
    if pod.get("status", {}).get("phase", "Pending") == "Pending":
        raise Refusal(
            400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
        )
    key = (namespace, name, container)
    text = kubelet.logs.get(key, "")
    if (tail := int_param(request.query, "tailLines")) is not None:
        lines = text.splitlines(keepends=True)
        text = "".join(lines[-tail:]) if tail > 0 else ""
    if (limit := int_param(request.query, "limitBytes")) is not None:
        text = text.encode()[:limit].decode(errors="ignore")
    if not is_true(request.query, "follow"):
        return web.Response(status=200, text=text, content_type="text/plain")
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    uid = pod["metadata"]["uid"]
    sent = len(kubelet.logs.get(key, ""))
    try:
        await response.prepare(request)
        if text:
            await response.write(text.encode())
        while not closing.is_set():
            signal = kubelet.wait_signal(namespace, name)
            current = store.objects[t.key].get((namespace, name))
            full = kubelet.logs.get(key, "")
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


def _container(pod: store_mod.Obj, name: str, asked: str | None) -> str:
    """The container a log request means: the one asked for, or the pod's only one."""
    containers = [c.get("name", "") for c in pod.get("spec", {}).get("containers", [])]
    if asked is None:
        if len(containers) > 1:
            raise Refusal(
                400,
                "BadRequest",
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]",
            )
        return containers[0] if containers else ""
    if asked not in containers:
        raise Refusal(400, "BadRequest", f"container {asked} is not valid for pod {name}")
    return asked
