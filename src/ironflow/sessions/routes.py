"""Where a sandbox's runtime answers, for a router that did not open it: :class:`RuntimeRoutes` (a seam).

agent-sandbox's upstream SDK creates its own claims and then calls the Sandbox Router with the
sandbox's name (``X-Sandbox-ID``), namespace, port and, as a hint, its pod's IP. An in-cluster
router (:mod:`ironflow.sandbox_router.cluster_app`) asks a :class:`RuntimeRoutes` for the
:class:`Route` of such a :class:`RouteTarget`: the address, and the token the router puts on the
request, which the backend delivered to the sandbox's runtime itself (never an API object). The
backend decides what is a sandbox at all: anything else is :class:`NotRoutable`, and the router
never connects to it. Values and an interface only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ironflow import errors
from ironflow.secrets import Secret

__all__ = ["NotRoutable", "Route", "RouteTarget", "RuntimeRoutes"]


@dataclass(frozen=True)
class RouteTarget:
    """What a router request names: the sandbox, its namespace, the port, the caller's pod-IP hint."""

    name: str
    namespace: str = "default"
    port: int = 8888
    pod_ip: str | None = None


@dataclass(frozen=True)
class Route:
    """Where to send the request (``http://host:port``) and the bearer token to put on it (None:
    none, a port other than the runtime's, which is the sandbox's own business)."""

    base_url: str
    token: Secret | None = None


class NotRoutable(errors.IronflowError):
    """The target is no sandbox this router serves (``status`` 403), or none at all (404), or not
    ready to answer (503); the message is the detail a caller sees."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@runtime_checkable
class RuntimeRoutes(Protocol):
    """Resolves router targets to runtimes, delivering a token of the router's own on first use."""

    async def route(self, target: RouteTarget) -> Route:
        """The route to ``target``'s runtime.

        Raises:
            NotRoutable: not a sandbox of this router, gone, or not ready.
            KubernetesError: the cluster could not be asked.
        """
        ...

    def forget(self, target: RouteTarget) -> None:
        """Drop what is known of ``target`` (its runtime did not answer: the pod may be new)."""
        ...

    async def aclose(self) -> None:
        """Release the clients."""
        ...
