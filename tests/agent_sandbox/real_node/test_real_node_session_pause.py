"""On a real node: an agent-sandbox session writes a file, is paused (its pod really goes, and its
processes with it), and the next request resumes it on a new pod that reads the file back from the
sandbox's own HOME PVC (``home_volume``).

The PVCs bind to hostPath PersistentVolumes this test makes in its tmp dir (the node runs no
provisioner), so the test also reads the file on the volume itself while the pod is gone. The
kwok tier (``test_realkube_agent_sandbox_pause.py``) shows the cluster's side; here the files are
the container's. Skipped when the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.agent_sandbox.real_node.test_real_node_warm_pool import SETTLE_S, SMALL, _running_member

from ironflow import errors
from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)  # the node's start counts in the first test

#: Prints the command lines of the container's processes, one a line.
PROCESSES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < \"$p/cmdline\"; echo; done 2>/dev/null"


@pytest.fixture
def host_volumes(real_node: RealNodeEnv, tmp_path: Path) -> Iterator[list[Path]]:
    """Three hostPath PersistentVolumes (a warm member's PVC, the refill's, one spare), removed after."""
    made: list[tuple[str, Path]] = []
    for i in range(3):
        path = tmp_path / f"pv-{i}"
        path.mkdir()
        os.chmod(path, 0o777)  # noqa: S103 - the pod's uid (10001) writes its HOME here; the dir is the test's
        name = f"pause-pv-{uuid.uuid4().hex[:8]}"
        spec = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": str(path)}}
        body = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}
        real_node.request("POST", "/api/v1/persistentvolumes", body)
        made.append((name, path))
    try:
        yield [path for _, path in made]
    finally:
        for name, _ in made:
            real_node.request("DELETE", f"/api/v1/persistentvolumes/{name}")


async def test_a_paused_sessions_file_comes_back_from_its_home_pvc_and_its_processes_do_not(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], host_volumes: list[Path]
) -> None:
    pod = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    provider = AgentSandboxProvider(pod.resources(SMALL)).warm_pool(replicas=1).ready_timeout(SETTLE_S)
    provider = provider.home_volume("1Gi")
    await provider.apply_template(node_api)
    await _running_member(node_api, node_ns)
    async with provider.sessions(api=node_api) as sessions:
        sandbox = await sessions.open(OpenOptions(ttl=600))
        await sandbox.files.write("notes/kept.txt", "written before the pause\n")
        await sandbox.commands.start(["sleep", "2999"])  # a background command: a process that runs on

        async def sleeping() -> bool:
            return "sleep 2999" in (await sandbox.commands.run(["sh", "-c", PROCESSES])).stdout

        await eventually(sleeping, limit_s=30, interval_s=0.5, what="the background command running")
        bound = claims.bound_sandbox(await node_api.get(claims.resources().claims, node_ns, sandbox.id))
        assert bound is not None
        first = await node_api.get(k8s.PODS, node_ns, bound)

        assert (await sessions.pause(sandbox.id)).paused is True
        with pytest.raises(errors.KubeNotFound):
            await node_api.get(k8s.PODS, node_ns, bound)  # the pod went
        on_volume = [p / "notes" / "kept.txt" for p in host_volumes if (p / "notes" / "kept.txt").exists()]
        assert [p.read_text() for p in on_volume] == ["written before the pause\n"]  # on the PVC, not the pod

        # The next request resumes it: a new pod, the file read back from the same PVC in the container.
        assert await sandbox.files.read("notes/kept.txt") == b"written before the pause\n"
        again = await node_api.get(k8s.PODS, node_ns, bound)
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        processes = (await sandbox.commands.run(["sh", "-c", PROCESSES])).stdout
        assert "sleep 2999" not in processes  # processes do not survive a pause
        assert (await sandbox.commands.run(["sh", "-c", "cat notes/kept.txt; pwd"])).stdout == (
            "written before the pause\n/home/claude\n"
        )
        await sandbox.close()
        await sandbox.disconnect()
