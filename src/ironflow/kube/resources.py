"""Kubernetes API values (pure): where each kind lives, and what the client returns.

``Resource`` and the built-in kinds ironflow uses, ``custom_resource`` for CRDs, raw
objects (``KubeObject``), list pages, watch events, exec results and the request
counters. No I/O: :mod:`ironflow.kube.api` sends requests with these; it re-exports them,
so callers import one module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from ironflow import errors

__all__ = [
    "CONFIGMAPS",
    "EVENTS",
    "JOBS",
    "NAMESPACES",
    "PERSISTENTVOLUMECLAIMS",
    "PODS",
    "SECRETS",
    "ExecResult",
    "KubeObject",
    "ObjectList",
    "RequestCounters",
    "RequestStats",
    "Resource",
    "WatchEvent",
    "custom_resource",
]

#: Raw Kubernetes JSON as the API returns it.
KubeObject: TypeAlias = dict[str, Any]


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
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
PERSISTENTVOLUMECLAIMS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
EVENTS: Final = Resource("", "v1", "events", "Event")
NAMESPACES: Final = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
JOBS: Final = Resource("batch", "v1", "jobs", "Job")


def custom_resource(group: str, version: str, plural: str, *, kind: str, namespaced: bool = True) -> Resource:
    """A custom resource (e.g. agent-sandbox's ``extensions.agents.x-k8s.io/v1beta1 sandboxclaims``)."""
    if not group or not version or not plural:
        raise errors.ConfigError("custom_resource needs a group, a version and a plural, e.g. ('x.io', 'v1', 'things')")
    return Resource(group, version, plural, kind, namespaced)


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


@dataclass(frozen=True)
class ExecResult:
    """What :meth:`KubeApi.exec` returns: the command's exit code and its two output streams."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False
