"""The real node as a session fixture (a plugin of tests/conftest.py): ``real_node`` yields one
:class:`RealNodeEnv` (control plane + containerd, kubelet, runc, gVisor, kube-proxy, CoreDNS,
kube-router) with the images built from this tree loaded; ``node_api`` a connected client.

CSI storage (``RealNodeEnv(csi=True)``: StorageClass and VolumeSnapshotClass
``ironflow-csi-hostpath``) is on when ``scripts/kube-testenv build --csi`` has built its parts;
``need_csi`` skips a test that needs it otherwise.

Skipped with the fix when the node's binaries or the machine's tools are missing. The images are
built by ``scripts/images build`` (``.ci/run`` builds them); a test that needs one that is not built
skips naming the command. With ``IRONFLOW_REQUIRE_REAL_NODE=1`` (``.ci/run`` sets it, having built
both) a missing part fails the test instead: CI must run the tier, never pass it by skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from ironflow.cluster import image_builds
from ironflow.kube import api as k8s
from ironflow.testing import images
from ironflow.testing._kubeenv_bins import find_csi_bin_dir
from ironflow.testing.kubeenv import KubeEnvError, KubeEnvNotAvailable
from ironflow.testing.realnode import RealNodeEnv, missing_tools

ROOT = Path(__file__).resolve().parents[2]
#: A real-node test's limit: its first test also starts the node (12 s idle, up to 2 min loaded).
REAL_NODE_TIMEOUT_S = 480
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def built_images() -> dict[str, Path]:
    """Image name -> its docker archive, for the images of this tree that are built."""
    out = {}
    for name in image_builds.IMAGES:
        path = images.archive_path(ROOT, name)
        if path.exists():
            out[name] = path
    return out


def image_reference(name: str) -> str:
    """The reference a pod names to run image ``name`` as loaded on the node."""
    return image_builds.local_reference(image_builds.IMAGES[name].reference)


def skip_or_fail(why: str, required_by: str = "IRONFLOW_REQUIRE_REAL_NODE") -> NoReturn:
    """Skip, or fail where the tier is required (CI built the node and the images: ``required_by=1``)."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{required_by}=1 but {why}", pytrace=False)
    pytest.skip(why)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests on the real node get :data:`REAL_NODE_TIMEOUT_S` unless they set their own: pytest-timeout
    counts fixture setup, and the first such test pays for the node's start."""
    for item in items:
        if "real_node" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(REAL_NODE_TIMEOUT_S))


def csi_built() -> bool:
    """Whether the CSI parts are built; where the tier is required, their absence fails (as the node's does)."""
    try:
        find_csi_bin_dir()
    except KubeEnvNotAvailable as exc:
        if os.environ.get("IRONFLOW_REQUIRE_REAL_NODE") == "1":
            pytest.fail(f"IRONFLOW_REQUIRE_REAL_NODE=1 but {exc}", pytrace=False)
        return False
    return True


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNodeEnv]:
    """One control plane and one real node for the session."""
    missing = missing_tools()
    if missing:
        skip_or_fail(f"the real node needs {', '.join(missing)}: bash scripts/install --test")
    try:
        env = RealNodeEnv(images=list(built_images().values()), agent_sandbox=True, csi=csi_built())
    except KubeEnvNotAvailable as exc:
        skip_or_fail(str(exc))
    try:
        env.start()
    except KubeEnvError:  # one retry: a port picked at start may be taken meanwhile
        env.start()
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture
def need_image(real_node: RealNodeEnv) -> dict[str, str]:
    """Image name -> reference on the node; a test asking for one not built skips with the command."""
    built = built_images()

    class _Refs(dict[str, str]):
        def __missing__(self, name: str) -> str:
            skip_or_fail(f"image {name} is not built from this tree: bash scripts/images build {name}")

    return _Refs({name: image_reference(name) for name in built})


@pytest.fixture
def need_csi(real_node: RealNodeEnv) -> RealNodeEnv:
    """The node, with CSI storage; a test asking for it skips with the command when it is not built."""
    if not real_node.csi:
        skip_or_fail("the node's CSI storage is not built: bash scripts/kube-testenv build --csi")
    return real_node


@pytest.fixture
def node_ns(real_node: RealNodeEnv) -> Iterator[str]:
    """A fresh namespace enforcing Pod Security ``restricted``, deleted after the test."""
    with real_node.namespace(f"node-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


@pytest.fixture
async def node_api(real_node: RealNodeEnv) -> AsyncIterator[k8s.KubeApi]:
    client = await k8s.KubeApi.connect(real_node.cluster_config())
    try:
        yield client
    finally:
        await client.close()
