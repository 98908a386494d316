"""The endless watch: reconnect from the last resourceVersion, relist after 410 Gone.

:meth:`KubeApi.watch <ironflow.kube.api.KubeApi.watch>` is this loop over the client's
``list_all`` and ``watch_stream``; it needs nothing else, so it takes any object with
those two (the :class:`WatchSource` protocol) and never imports the client. Failures back
off (``backoff_delay``); a server that keeps closing at once is paced too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Protocol

from ironflow import errors
from ironflow.kube.resources import ObjectList, Resource, WatchEvent
from ironflow.kube.responses import backoff_delay

__all__ = ["WatchSource", "reconnecting"]


class WatchSource(Protocol):
    """What the loop needs of a client: a full list and one watch connection."""

    async def list_all(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = ...,
        field_selector: str | None = ...,
    ) -> ObjectList: ...

    def watch_stream(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = ...,
        field_selector: str | None = ...,
        timeout_seconds: int = ...,
    ) -> AsyncGenerator[WatchEvent, None]: ...


async def reconnecting(
    source: WatchSource,
    resource: Resource,
    namespace: str | None,
    *,
    resource_version: str | None,
    label_selector: str | None,
    field_selector: str | None,
    relist_on_gone: bool,
    max_retries: int,
    timeout_seconds: int,
) -> AsyncGenerator[WatchEvent, None]:
    """Events until cancelled; ``RELISTED`` carries the whole state after a (re)list."""
    rv = resource_version
    failures = 0
    quick_ends = 0
    loop = asyncio.get_running_loop()
    while True:
        try:
            if rv is None:
                listed = await source.list_all(
                    resource, namespace, label_selector=label_selector, field_selector=field_selector
                )
                rv = listed.resource_version
                yield WatchEvent("RELISTED", {}, tuple(listed.items), rv)
            started, seen = loop.time(), 0
            stream = source.watch_stream(
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
