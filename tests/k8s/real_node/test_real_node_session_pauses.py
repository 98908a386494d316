"""Pause and resume of Kubernetes sessions on real pods (the runner image's runtime, each pod its own
emptyDir HOME): a paused session's pod really goes, and its processes with it; the next request
through the same handle resumes it on a new pod whose files are the old one's, byte for byte with
their modes (read back from the archive in the snapshot store); an idle session is suspended and its
next request brings its files back; over HTTP the new pod's runtime takes a new token of this process.

The kwok tier (``tests/sessions/integration/test_k8s_session_pauses.py``) shows the cluster's side
and the refusals; here the files are the pods' own. Skipped when the node's binaries or the runner
image are missing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import nullcontext
from pathlib import Path

import pytest
from tests.fakes.node_network import inside_node_network
from tests.k8s.real_node.session_trees import MAKE, SMALL, less_setgid, listing

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.sessions.client import AsyncSandbox
from ironflow.testing.polling import eventually

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(600)

#: Prints the command lines of the container's processes, one a line.
PROCESSES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < \"$p/cmdline\"; echo; done 2>/dev/null"


async def _uid(api: k8s.KubeApi, namespace: str, name: str) -> str | None:
    try:
        pod = await api.get(k8s.PODS, namespace, name)
    except errors.KubeNotFound:
        return None
    return None if pod["metadata"].get("deletionTimestamp") else str(pod["metadata"]["uid"])


async def _sleeping(sandbox: AsyncSandbox) -> bool:
    return "sleep 2999" in (await sandbox.commands.run(["sh", "-c", PROCESSES])).stdout


@pytest.fixture
async def sessions(
    request: pytest.FixtureRequest,
    node_ns: str,
    node_api: k8s.KubeApi,
    need_image: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[K8sSessions]:
    """The node's sessions, each request an exec (``http``, by indirect parameter: at the pod's IP,
    this thread inside the node's network); every pod gone after."""
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_DIR", str(tmp_path / "store"))
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    transport = getattr(request, "param", "exec")
    network = inside_node_network(request.getfixturevalue("real_node")) if transport == "http" else nullcontext()
    with network:
        async with p.resources(SMALL).sessions(api=node_api, transport=transport) as opened:
            yield opened

    async def gone() -> bool:
        return not (await node_api.list(k8s.PODS, node_ns)).items

    await eventually(gone, limit_s=120, interval_s=0.5, what="every session pod gone")


async def test_a_paused_sessions_files_come_back_on_a_new_pod_and_its_processes_do_not(
    sessions: K8sSessions, node_ns: str, node_api: k8s.KubeApi
) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=400, labels={"team": "a"}))
    made = await sandbox.commands.run(["sh", "-c", MAKE])
    assert made.exit_code == 0, made
    before = await listing(sandbox)
    assert any(line.startswith("./w/bin f 600 ") for line in before), before
    await sandbox.commands.start(["sleep", "2999"])  # a background command: a process that runs on
    await eventually(lambda: _sleeping(sandbox), limit_s=30, interval_s=0.5, what="the background command")
    first = await _uid(node_api, node_ns, sandbox.id)

    paused = await sessions.pause(sandbox.id)
    assert (paused.paused, paused.labels) == (True, {"team": "a"})
    assert await _uid(node_api, node_ns, sandbox.id) is None  # the pod went, its processes with it
    assert [(i.id, i.paused) for i in await sessions.list()] == [(sandbox.id, True)]

    after = await listing(sandbox)  # the handle's request resumes it first
    assert after == less_setgid(before)
    second = await _uid(node_api, node_ns, sandbox.id)
    assert second not in (None, first)  # a new pod for the same id
    assert not await _sleeping(sandbox)  # processes never come back
    ran = await sandbox.commands.run(["sh", "-c", "w/d/x.sh; cat w/g/up"])
    assert ran.stdout == "hi\nro", ran
    assert await sessions.snapshots() == []  # the archive went with the resume
    await sandbox.close()


async def test_an_idle_session_is_suspended_and_its_next_request_brings_its_files_back(
    sessions: K8sSessions, node_ns: str, node_api: k8s.KubeApi
) -> None:
    sandbox = await sessions.open(OpenOptions(ttl=300, idle_suspend=2.0))
    await sandbox.files.write("notes/kept.txt", "kept through an idle suspend\n")
    await sandbox.commands.run(["chmod", "604", "notes/kept.txt"])

    async def suspended() -> bool:
        return await _uid(node_api, node_ns, sandbox.id) is None

    await eventually(suspended, limit_s=60, interval_s=0.5, what="the idle session's pod gone")
    assert [i.paused for i in await sessions.list()] == [True]
    assert await sandbox.files.read("notes/kept.txt") == b"kept through an idle suspend\n"
    assert (await sandbox.commands.run(["stat", "-c", "%a", "notes/kept.txt"])).stdout == "604\n"
    assert await _uid(node_api, node_ns, sandbox.id) is not None
    await sandbox.close()


@pytest.mark.parametrize("sessions", ["http"], indirect=True)
async def test_over_http_a_resumed_session_answers_at_its_new_pod_with_a_new_token(sessions: K8sSessions) -> None:
    """A resume delivers this process's new token to the new pod's runtime; ``route`` and ``connect``
    reach it there (a handle over HTTP from before holds the old address)."""
    sandbox = await sessions.open(OpenOptions(ttl=300))
    await sandbox.files.write("notes/kept.txt", "kept over http\n")
    await sandbox.disconnect()  # its client holds the old pod's address: a new handle comes after
    before, old_token = sessions.route(sandbox.id)
    assert before.startswith("http://")
    await sessions.pause(sandbox.id)
    await sessions.resume(sandbox.id)
    after, new_token = sessions.route(sandbox.id)
    assert after.startswith("http://")
    assert new_token.reveal() != old_token.reveal()
    again = await sessions.connect(sandbox.id)
    assert await again.files.read("notes/kept.txt") == b"kept over http\n"
    await again.close()
