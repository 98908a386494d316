"""Snapshots and forks of Kubernetes sessions on real pods (the runner image's runtime, its own
Python, each pod its own emptyDir HOME): ten forks of one session each see the parent's files and
keep their own writes, the parent is unchanged; a snapshot outlives its session's pod and a session
opened from it has the same bytes, modes and symlinks; the runtime's own state in HOME (its token
FIFO) is never in a snapshot.

The kwok tier (``tests/sessions/integration/test_cluster_session_snapshots.py``) runs every pod's
exec in one host directory; here each pod has its own files. Skipped when the node's binaries or
the runner image are missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.fakes.node_network import inside_node_network
from tests.k8s.real_node.session_trees import MAKE, SMALL, less_setgid, listing

from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(600)

FORKS = 10


async def test_ten_forks_keep_their_writes_and_a_snapshot_restores_after_close(
    node_ns: str,
    node_api: k8s.KubeApi,
    need_image: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_DIR", str(tmp_path / "store"))
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    async with p.resources(SMALL).sessions(api=node_api, transport="exec") as sessions:
        parent = await sessions.open(OpenOptions(ttl=400, labels={"team": "a"}))
        made = await parent.commands.run(["sh", "-c", MAKE])
        assert made.exit_code == 0, made
        fifo = await parent.commands.run(["sh", "-c", "test -p .ironflow/runtime-tokens && echo fifo"])
        assert fifo.stdout == "fifo\n", fifo  # the runtime's own state is in HOME: a snapshot must skip it
        before = await listing(parent)
        assert "./w/g d 2775" in before
        assert any(line.startswith("./w/g/deep/s f 664 ") for line in before), before

        forks = await sessions.fork(parent.id, count=FORKS)
        assert len({f.id for f in forks}) == FORKS
        for i, fork in enumerate(forks):
            assert await listing(fork) == less_setgid(before)
            wrote = await fork.commands.run(["sh", "-c", f"echo {i} > w/mine-{i}; echo changed >> w/ro 2>/dev/null; :"])
            assert wrote.exit_code == 0, wrote
        for i, fork in enumerate(forks):
            mine = await fork.commands.run(["sh", "-c", "ls w | grep mine- ; cat w/ro"])
            assert mine.stdout.split() == [f"mine-{i}", "ro"], mine  # its own write only; ro stayed read-only
        assert await listing(parent) == before  # the parent is unchanged

        snap = await sessions.snapshot(parent.id, name="kept")
        for handle in [parent, *forks]:
            await handle.close()

        restored = await sessions.open(OpenOptions(ttl=120, from_snapshot=snap.id))
        assert await listing(restored) == less_setgid(before)
        assert (await restored.commands.run(["sh", "-c", "w/d/x.sh; cat w/g/up"])).stdout == "hi\nro"
        await restored.close()

    async def gone() -> bool:
        return not (await node_api.list(k8s.PODS, node_ns)).items

    await eventually(gone, limit_s=120, interval_s=0.5, what="every session pod gone")


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_over_http_a_snapshot_restores_and_two_forks_keep_their_writes(
    real_node: RealNodeEnv,
    node_ns: str,
    node_api: k8s.KubeApi,
    need_image: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runtime: str,
) -> None:
    """The runtime as the pod's main process, reached at the pod's IP (this thread inside the node's network)."""
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_DIR", str(tmp_path / "store"))
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    if runtime == "gvisor":
        p = p.runtime_class("gvisor")
    with inside_node_network(real_node):
        async with p.resources(SMALL).sessions(api=node_api, transport="http") as sessions:
            parent = await sessions.open(OpenOptions(ttl=300))
            assert (await parent.commands.run(["sh", "-c", MAKE])).exit_code == 0
            before = await listing(parent)
            forks = await sessions.fork(parent.id, count=2)
            for i, fork in enumerate(forks):
                assert await listing(fork) == less_setgid(before)
                await fork.files.write(f"w/mine-{i}", str(i))
            for i, fork in enumerate(forks):
                assert (await fork.commands.run(["sh", "-c", "ls w | grep mine-"])).stdout == f"mine-{i}\n"
            assert await listing(parent) == before
            snap = await sessions.snapshot(parent.id)
            for handle in [parent, *forks]:
                await handle.close()
            restored = await sessions.open(OpenOptions(ttl=120, from_snapshot=snap.id))
            assert await listing(restored) == less_setgid(before)
            await restored.close()
