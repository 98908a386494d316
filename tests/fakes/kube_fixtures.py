"""The Kubernetes contract suite's swappable cluster, as fixtures (a plugin of tests/conftest.py).

``kube`` yields a :class:`KubeCase`: a connected :class:`KubeApi`, a fresh namespace, and a
:class:`ClusterControl` that scripts what a kubelet would do. It is parametrized by backend, so
the same tests run against every backend listed in ``KUBE_BACKENDS``: the in-process
``KubeTestServer`` and a real kube-apiserver with kwok (skipped, with the reason, until
``scripts/kube-testenv build`` has built it). Tests that need test-server-only powers
(fault injection, 403 denial, history compaction) use ``case.server`` and skip when it is None.
``kro_env`` (``tests/fakes/kro_controller.py``) runs the real KRO controller on that cluster,
``snapshot_env`` (``tests/fakes/snapshot_controller.py``) the real snapshot-controller.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from tests.fakes import kubelet
from tests.fakes.kro_controller import kro_env  # noqa: F401  (session fixture: KRO on that cluster)
from tests.fakes.kubecase import KubeCase, ServerControl
from tests.fakes.kubelet import kube_env  # noqa: F401  (session fixture: the real cluster)
from tests.fakes.snapshot_controller import snapshot_env  # noqa: F401  (session fixture: on that cluster)

from ironflow.kube import api
from ironflow.testing.kube import KubeTestServer

KUBE_BACKENDS = ["test-server", "real-apiserver"]

_namespaces = itertools.count(1)


@pytest.fixture
def server(kube: KubeCase) -> KubeTestServer:
    """The case's in-process test server; skips on a real cluster."""
    return kube.need_server()


@pytest.fixture(params=KUBE_BACKENDS)
async def kube(request: pytest.FixtureRequest) -> AsyncIterator[KubeCase]:
    """A connected API and a fresh namespace on each backend."""
    if request.param == "real-apiserver":  # skipped, with the reason, when the binaries are not built
        env = request.getfixturevalue("kube_env")
        async with kubelet.manual_namespace(env) as (kube_api, namespace, control):
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
