"""The swappable cluster of the Kubernetes contract suite, as tests type it.

``tests/fakes/kube_fixtures.py``'s ``kube`` fixture (that module is a plugin of
``tests/conftest.py``) yields a :class:`KubeCase` on every backend (the in-process
:class:`KubeTestServer`, a real kube-apiserver with kwok); test modules import the type from
here, never from the plugin, so its fixtures stay registered once. Also
:func:`hold_create_answers`, the "create sent, answer not back yet" of the cancel tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from ironflow.kube import api
from ironflow.kube.api import KubeApi, KubeObject, Resource
from ironflow.testing.kube import KubeTestServer, PodScript

__all__ = ["ClusterControl", "KubeCase", "ServerControl", "hold_create_answers"]


class ClusterControl(Protocol):
    """What a contract test may ask of a cluster beyond the API: the kubelet's part."""

    async def set_pod_phase(
        self, namespace: str, name: str, phase: str, *, exit_code: int | None = None, reason: str | None = None
    ) -> None:
        """Report a pod as Pending, Running, Succeeded or Failed."""

    async def set_log(self, namespace: str, pod: str, text: str) -> None:
        """Replace the log of the pod's (only) container."""

    async def append_log(self, namespace: str, pod: str, text: str) -> None:
        """Append to the log of the pod's (only) container; followers see it at once."""

    async def script_pods(self, script: PodScript) -> None:
        """Run every new pod matching ``script`` as it says."""


class ServerControl:
    """:class:`ClusterControl` over a :class:`KubeTestServer`."""

    def __init__(self, server: KubeTestServer) -> None:
        self.server = server

    async def set_pod_phase(
        self, namespace: str, name: str, phase: str, *, exit_code: int | None = None, reason: str | None = None
    ) -> None:
        self.server.set_pod_phase(namespace, name, phase, exit_code=exit_code, reason=reason)

    async def set_log(self, namespace: str, pod: str, text: str) -> None:
        self.server.set_log(namespace, pod, text)

    async def append_log(self, namespace: str, pod: str, text: str) -> None:
        self.server.append_log(namespace, pod, text)

    async def script_pods(self, script: PodScript) -> None:
        self.server.script_pods(script)


@dataclass
class KubeCase:
    """One contract test's cluster: the API, a fresh namespace, the control handle, and the
    test server when the backend is one (``None`` on a real cluster)."""

    api: api.KubeApi
    namespace: str
    control: ClusterControl
    server: KubeTestServer | None

    def need_server(self) -> KubeTestServer:
        """The test server, or skip: fault injection and denial exist only there."""
        if self.server is None:
            pytest.skip("needs the in-process KubeTestServer (fault injection / denial)")
        return self.server


def hold_create_answers(client: KubeApi, resource: Resource | None = None) -> asyncio.Event:
    """Let ``client.create`` create the object, then hold its answer back (30 s) for ``resource``
    (None: every resource): the object exists on the server but the create has not returned.

    The returned event is set once such an object was created: cancel then, while the answer is
    "still on its way".
    """
    original = client.create
    held = resource
    sent = asyncio.Event()

    async def slow_answer(resource: Resource, namespace: str | None, body: Mapping[str, Any]) -> KubeObject:
        answer = await original(resource, namespace, body)
        if held is None or resource == held:
            sent.set()
            await asyncio.sleep(30)  # the answer is "still on its way" when the cancel lands
        return answer

    client.create = slow_answer  # type: ignore[method-assign]
    return sent
