"""Integration fixtures: the Kubernetes contract suite's swappable cluster.

``kube`` yields a :class:`KubeCase`: a connected :class:`KubeApi`, a fresh namespace, and a
:class:`ClusterControl` that scripts what a kubelet would do. It is parametrized by backend, so
the same ``tests/integration/test_kube_api_*.py`` run against every backend listed in
``KUBE_BACKENDS``: today the in-process ``KubeTestServer``; a later issue adds a real
kube-apiserver with kwok behind the same interface. Tests that need test-server-only powers
(fault injection, 403 denial, history compaction) use ``case.server`` and skip when it is None.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from ironflow.k8s import api
from ironflow.testing import kubeenv_kubelet
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.kubeenv_kubelet import kube_env  # noqa: F401  (session fixture: the real cluster)

KUBE_BACKENDS = ["test-server", "real-apiserver"]

_namespaces = itertools.count(1)


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


@pytest.fixture(params=KUBE_BACKENDS)
async def kube(request: pytest.FixtureRequest) -> AsyncIterator[KubeCase]:
    """A connected API and a fresh namespace on each backend."""
    if request.param == "real-apiserver":  # skipped, with the reason, when the binaries are not built
        env = request.getfixturevalue("kube_env")
        async with kubeenv_kubelet.manual_namespace(env) as (kube_api, namespace, control):
            yield KubeCase(kube_api, namespace, control, None)
        return
    if request.param != "test-server":  # pragma: no cover - later backends plug in here
        pytest.skip(f"backend {request.param} not available")
    async with KubeTestServer() as server:
        namespace = f"contract-{next(_namespaces)}"
        server.create_namespace(namespace)
        kube_api = await api.KubeApi.connect(server.cluster_config())
        try:
            yield KubeCase(kube_api, namespace, ServerControl(server), server)
        finally:
            await kube_api.close()


def pod_manifest(
    name: str | None = None,
    *,
    labels: dict[str, str] | None = None,
    generate_name: str | None = None,
    active_deadline_seconds: int | None = None,
    containers: tuple[str, ...] = ("main",),
) -> dict[str, Any]:
    """A minimal valid Pod (busybox, one container by default)."""
    meta: dict[str, Any] = {"labels": labels or {}}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    spec: dict[str, Any] = {
        "containers": [{"name": c, "image": "busybox:1.36", "command": ["true"]} for c in containers],
        "restartPolicy": "Never",
    }
    if active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = active_deadline_seconds
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


PodMaker = Callable[..., dict[str, Any]]


@pytest.fixture
def make_pod() -> PodMaker:
    """``make_pod(name, labels=..., ...)``: a minimal valid Pod manifest (see :func:`pod_manifest`)."""
    return pod_manifest
