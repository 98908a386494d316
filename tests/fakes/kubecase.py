"""The swappable cluster of the Kubernetes contract suite, as tests type it.

``tests/fakes/kube_fixtures.py``'s ``kube`` fixture (that module is a plugin of
``tests/conftest.py``) yields a :class:`KubeCase` on every backend (the in-process
:class:`KubeTestServer`, a real kube-apiserver with kwok); test modules import the type from
here, never from the plugin, so its fixtures stay registered once. Also
:func:`hold_create_answers`, the "create sent, answer not back yet" of the cancel tests, and
:func:`names` / :func:`nothing_left`, what a namespace holds, asked through the API (so the
same assertion holds on every backend).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pytest
from tests.fakes import kubelet_problems

from ironflow.kube import api
from ironflow.kube.api import KubeApi, KubeObject, Resource
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually

__all__ = ["ClusterControl", "KubeCase", "ServerControl", "hold_create_answers", "names", "nothing_left"]


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

    async def report_problem(self, namespace: str, name: str, reason: str, message: str) -> None:
        """Write the status and events a kubelet writes for ``reason`` (``ErrImagePull``,
        ``CreateContainerConfigError``, ``OOMKilled``, ``Evicted``, ... see
        ``tests/fakes/kubelet_problems.py``) on the pod."""

    async def script_jobs(self, script: PodScript) -> None:
        """Run the pods of every new Job whose name starts with ``script.name_prefix`` as it
        says (the Job controller makes the pod: the test server's own, or the real one)."""


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

    async def report_problem(self, namespace: str, name: str, reason: str, message: str) -> None:
        pod = self.server.get_object(api.PODS, namespace, name)
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        for kind, why, said in kubelet_problems.problem_events(reason, message):  # events first, as a kubelet
            self.server.record_event(namespace, name, kind, why, said)
        self.server.set_pod_status(namespace, name, kubelet_problems.problem_status(pod, reason, message))

    async def script_jobs(self, script: PodScript) -> None:
        self.server.script_jobs(script)


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


#: What a real namespace holds from birth (the root CA ConfigMap), not a test's object.
NAMESPACE_OWN = frozenset({"kube-root-ca.crt"})


async def _items(case: KubeCase, resource: Resource) -> list[KubeObject]:
    return [
        o for o in (await case.api.list(resource, case.namespace)).items if o["metadata"]["name"] not in NAMESPACE_OWN
    ]


async def names(case: KubeCase, *resources: Resource) -> list[str]:
    """The names of the objects of ``resources`` in the case's namespace, through the API
    (what every namespace holds on a real server, :data:`NAMESPACE_OWN`, left out)."""
    found: list[str] = []
    for resource in resources:
        found += [o["metadata"]["name"] for o in await _items(case, resource)]
    return found


def _deleting(obj: KubeObject) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


async def nothing_left(case: KubeCase, *resources: Resource) -> None:
    """Every object of ``resources`` in the namespace is deleted (none without a
    ``deletionTimestamp``) and, once the kubelet has stopped the pods, gone.

    The test server removes a deleted pod at once; a real kube-apiserver keeps a scheduled pod
    until its kubelet (kwok) confirms it stopped: only that wait is "eventually"."""
    live: list[str] = []
    for resource in resources:
        items = await _items(case, resource)
        live += [f"{resource.plural}/{o['metadata']['name']}" for o in items if not _deleting(o)]
    assert live == [], f"not deleted: {live}"
    left: list[str] = []

    async def gone() -> bool:
        left[:] = await names(case, *resources)
        return not left

    await eventually(gone, interval_s=0.05, what=lambda: f"the deleted objects to go; left: {left}")
