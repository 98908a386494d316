"""The test server's own pods/exec: off until enabled, a kubelet's NonZeroExitCode Status for a
failing command (so ``KubeApi.exec`` returns the code), scripted replies, and cleanup on stop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.fakes.unclosed import unclosed_after_collect

from ironflow import errors
from ironflow.kube import api as k8s
from ironflow.testing._kube_exec import exit_status
from ironflow.testing.kube import ExecReply, KubeTestServer, local_exec, scripted_exec
from ironflow.testing.polling import eventually

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "box"},
    "spec": {
        "containers": [{"name": "main", "image": "img"}],
        "automountServiceAccountToken": False,
    },
}


@pytest.fixture
async def kube() -> AsyncIterator[tuple[KubeTestServer, k8s.KubeApi]]:
    async with KubeTestServer() as server, await k8s.KubeApi.connect(server.cluster_config()) as api:
        await api.create(k8s.PODS, "default", POD)
        server.set_pod_phase("default", "box", "Running")
        yield server, api


async def test_exec_is_refused_until_the_test_enables_it(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    server, api = kube
    with pytest.raises(errors.KubernetesError, match="400"):
        await api.exec("default", "box", ("true",))
    server.serve_exec(local_exec())
    assert (await api.exec("default", "box", ("true",))).exit_code == 0
    server.serve_exec(None)
    with pytest.raises(errors.KubernetesError, match="400"):
        await api.exec("default", "box", ("true",))


async def test_a_non_zero_exit_is_a_kubelet_status_with_the_code(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    """The raw channel-3 frame is what a kubelet sends; KubeApi.exec turns it into exit_code."""
    server, api = kube
    server.serve_exec(local_exec())
    assert (await api.exec("default", "box", ("sh", "-c", "exit 42"))).exit_code == 42
    assert server.execs[-1].exit_code == 42
    url = f"{server.url}/api/v1/namespaces/default/pods/box/exec?command=sh&command=-c&command=exit+5&stdout=true"
    headers = {"Authorization": f"Bearer {server.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, headers=headers, protocols=("v4.channel.k8s.io",)) as ws,
    ):
        frames = [m.data async for m in ws if m.type is aiohttp.WSMsgType.BINARY]
    status: dict[str, Any] = json.loads(frames[-1][1:])
    assert frames[-1][0] == 3
    assert status == {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: exit status 5",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "5"}]},
    }


def test_exit_status_zero_is_success() -> None:
    assert exit_status(0) == {"metadata": {}, "status": "Success"}
    assert exit_status(1)["reason"] == "NonZeroExitCode"


async def test_scripted_exec_answers_from_the_pod_and_command(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    """The script sees the stored pod (here its token setting) and the argv; nothing runs locally."""
    server, api = kube
    seen: list[list[str]] = []

    def answer(pod: dict[str, Any], container: str, command: list[str]) -> ExecReply:
        seen.append(command)
        mounted = pod["spec"].get("automountServiceAccountToken", True)
        return ExecReply(stdout=f"{container} token={mounted}\n".encode(), stderr=b"warn\n", exit_code=3)

    server.serve_exec(scripted_exec(answer))
    out = await api.exec("default", "box", ("ls", "/var/run/secrets"))
    assert (out.exit_code, out.stdout, out.stderr) == (3, b"main token=False\n", b"warn\n")
    assert seen == [["ls", "/var/run/secrets"]]
    assert server.execs[-1].exit_code == 3
    assert server.running_execs == 0


async def test_stop_kills_a_command_still_running_and_reports_137(kube: tuple[KubeTestServer, k8s.KubeApi]) -> None:
    server, api = kube
    server.serve_exec(local_exec())
    task = asyncio.ensure_future(api.exec("default", "box", ("sleep", "30")))
    await eventually(lambda: server.running_execs, interval_s=0.02, what="the command to start")
    assert server.running_execs == 1
    await server.stop()
    assert server.running_execs == 0
    assert (await task).exit_code == 137  # SIGKILL: 128 + 9, as a kubelet reports it


async def test_a_client_that_drops_the_connection_mid_output_leaves_nothing_behind(
    kube: tuple[KubeTestServer, k8s.KubeApi],
) -> None:
    """The dropped session's handler is cancelled (as aiohttp does when a client goes away);
    by the time the server has stopped, the command is killed, what it wrote and nobody read
    is drained, and the session has ended: no task still cancelling, no pipe left for the collector."""
    server, _ = kube
    server.serve_exec(local_exec())
    before = asyncio.all_tasks()
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"GET /api/v1/namespaces/default/pods/box/exec?command=yes&stdout=true HTTP/1.1\r\n"
        b"Host: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n" % (server.url.encode(), server.token.encode())
    )
    assert (await reader.readline()).startswith(b"HTTP/1.1 101")
    await reader.readexactly(1 << 16)  # the command is writing: its output is more than anyone reads
    writer.transport.abort()
    await eventually(lambda: server.running_execs == 0, interval_s=0.02, what="the command to be killed")
    await server.stop()
    await asyncio.sleep(0)
    assert [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()] == []
    assert unclosed_after_collect() == []
