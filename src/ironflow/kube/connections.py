"""The API clients an owner opened: one per (event loop, cluster), closed by the owner.

A provider owns one :class:`Connections`: every step it runs on a loop shares one client
per cluster (one connection pool and, through the informer registry, one pod watch per
namespace), and the provider's ``aclose()`` closes them.

Invariant: a client is only ever used and closed on the loop that opened it; clients of a
loop that has ended are dropped with it (their sessions died with the loop).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable

from ironflow.kube import api as kube
from ironflow.kube import clusters

__all__ = ["ApiSource", "Connections", "constant"]

#: Connects (once) and returns the client; every step of a runner awaits it.
ApiSource = Callable[[], Awaitable[kube.KubeApi]]


class Connections:
    """Clients by (event loop, cluster), opened on first use."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[clusters.ClusterConfig, kube.KubeApi]]
        self._by_loop = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"Connections(loops={len(self._by_loop)})"

    async def get(self, cluster: clusters.ClusterConfig | None) -> kube.KubeApi:
        """The running loop's client for ``cluster`` (None: the default kubeconfig)."""
        key = cluster if cluster is not None else clusters.DefaultCluster()
        clients = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        client = clients.get(key)
        if client is None:
            fresh = await kube.KubeApi.connect(key)
            client = clients.setdefault(key, fresh)
            if client is not fresh:  # another step connected meanwhile
                await fresh.close()
        return client

    def source(self, cluster: clusters.ClusterConfig | None) -> ApiSource:
        """An :data:`ApiSource` over :meth:`get` for one cluster."""

        async def connect() -> kube.KubeApi:
            return await self.get(cluster)

        return connect

    async def aclose(self) -> None:
        """Close the running loop's clients (a later step opens new ones)."""
        clients = self._by_loop.pop(asyncio.get_running_loop(), {})
        for client in clients.values():
            await client.close()


def constant(client: kube.KubeApi) -> ApiSource:
    """A source that always hands out ``client`` (its caller owns and closes it)."""

    async def source() -> kube.KubeApi:
        return client

    return source
