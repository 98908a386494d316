"""``KubeApi.exec`` (pods/exec over a websocket) against the test server's exec endpoint.

The command runs as a local subprocess standing in for the container: exit codes, the two
output streams, stdin of a known length, refusals as the API server answers them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ironflow import errors
from ironflow.kube import api as k8s
from ironflow.testing.kube import KubeTestServer, local_exec
from ironflow.testing.polling import eventually

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "box"},
    "spec": {"containers": [{"name": "main", "image": "img", "env": [{"name": "GREETING", "value": "hello"}]}]},
}


@pytest.fixture
async def kube() -> AsyncIterator[tuple[KubeTestServer, k8s.KubeApi]]:
    async with KubeTestServer() as server, await k8s.KubeApi.connect(server.cluster_config()) as api:
        await api.create(k8s.PODS, "default", POD)
        server.set_pod_phase("default", "box", "Running")
        server.serve_exec(local_exec({"EXTRA": "1"}))
        yield server, api


async def test_exec_returns_exit_code_stdout_and_stderr_separately(
    kube: tuple[KubeTestServer, k8s.KubeApi],
) -> None:
    _, api = kube
    result = await api.exec("default", "box", ("sh", "-c", "echo $GREETING $EXTRA; echo oops >&2; exit 7"))
    assert (result.exit_code, result.stdout, result.stderr) == (7, b"hello 1\n", b"oops\n")
    ok = await api.exec("default", "box", ("true",))
    assert ok.exit_code == 0
    assert api.counters.by_verb["exec"] == 2


async def test_exec_sends_stdin_of_a_known_length(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    server, api = kube
    payload = bytes(range(256)) * 4096  # 1 MiB, several frames
    result = await api.exec("default", "box", ("sh", "-c", f"head -c {len(payload)} | wc -c"), stdin=payload)
    assert result.stdout.strip() == str(len(payload)).encode()
    assert bytes(server.execs[-1].stdin) == payload


async def test_exec_without_stdin_reads_eof(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    _, api = kube
    result = await api.exec("default", "box", ("cat",))
    assert (result.exit_code, result.stdout) == (0, b"")


async def test_exec_output_beyond_the_cap_is_dropped_and_flagged(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    _, api = kube
    result = await api.exec("default", "box", ("sh", "-c", "head -c 100000 /dev/zero"), max_output_bytes=1000)
    assert len(result.stdout) == 1000
    assert result.truncated


async def test_exec_in_a_missing_pod_is_not_found(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    _, api = kube
    with pytest.raises(errors.KubeNotFound, match="exec in pods default/nope: HTTP 404"):
        await api.exec("default", "nope", ("true",))


async def test_exec_in_a_pod_that_is_not_running_is_refused(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    server, api = kube
    server.set_pod_phase("default", "box", "Succeeded")
    with pytest.raises(errors.KubernetesError, match="HTTP 400") as caught:
        await api.exec("default", "box", ("true",))
    assert caught.value.status == 400


async def test_exec_in_an_unknown_container_is_refused(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    _, api = kube
    with pytest.raises(errors.KubernetesError, match="HTTP 400"):
        await api.exec("default", "box", ("true",), container="sidecar")


async def test_cancelled_exec_stops_the_command(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    server, api = kube
    task = asyncio.ensure_future(api.exec("default", "box", ("sh", "-c", "sleep 30")))
    await eventually(lambda: server.execs, what="the command to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not server.running_execs, what="the command to stop after the client left")


async def test_exec_hands_every_chunk_to_on_output_as_it_arrives(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    server, api = kube
    seen: list[tuple[int, bytes, int]] = []

    def on_output(stream: int, chunk: bytes) -> None:
        seen.append((stream, chunk, server.running_execs))

    result = await api.exec(
        "default", "box", ("sh", "-c", "echo one; sleep 0.3; echo two >&2"), on_output=on_output, max_output_bytes=2
    )
    assert [(s, c) for s, c, _ in seen] == [(1, b"one\n"), (2, b"two\n")]
    assert seen[0][2] == 1  # the command was still running
    assert result.stdout == b"on"
    assert result.truncated
