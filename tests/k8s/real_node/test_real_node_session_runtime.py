"""A Kubernetes session whose pod runs the session runtime as its main process, on the real node,
reached over HTTP at the pod's IP as a worker pod reaches it (this test's thread inside the node's
network namespace, :mod:`tests.fakes.node_network`): a command runs and its parent is the pod's
pid 1, the runtime; files go both ways; a request without this process's token, straight to
``podIP:8888``, gets 401 (the token-less probe alone gets its 200 that says nothing); the token
is in no API object of the namespace (pods, events, ConfigMaps, Secrets, scanned as JSON) nor in
the pod's log; a second backend object reattaches by id with a token of its own delivered by
exec, and the first holder's handle still works. Skipped when the node or the runner image is
missing."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from tests.fakes import api_scan, node_containers
from tests.fakes.node_network import inside_node_network

from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.sandbox_router import app as router_app
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(480)  # the first real-node test of a run also starts the node


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_session_reaches_the_runtime_its_pod_runs_over_http_with_its_own_token(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    if runtime == "gvisor":
        p = p.runtime_class("gvisor")
    with inside_node_network(real_node):
        first = p.sessions(api=node_api, transport="http")  # refuses instead of falling back to exec
        sandbox = await first.open(OpenOptions(ttl=300, env={"GREETING": "hello"}))
        pod = await node_api.get(k8s.PODS, node_ns, sandbox.id)
        url, token = first.route(sandbox.id)
        assert url == f"http://{pod['status']['podIP']}:8888"
        container = node_containers.running_container(pod)
        assert container is not None

        ran = await sandbox.commands.run(
            ["sh", "-c", "id -u; echo $GREETING; echo $PPID; tr '\\0' ' ' </proc/1/cmdline"]
        )
        assert ran.exit_code == 0, ran
        uid, greeting, parent, main = ran.stdout.splitlines()
        assert (uid, greeting, parent) == ("10001", "hello", "1")  # the runtime (pid 1) ran it: no exec
        assert main.startswith("python3 -I -S /opt/ironflow/runtime/server.py --port 8888 --token-fifo "), main

        await sandbox.files.write("notes/a.txt", "over http\n")
        assert await sandbox.files.read("notes/a.txt") == b"over http\n"
        seen = await sandbox.commands.run(["sh", "-c", "cat notes/a.txt; exit 3"])
        assert (seen.exit_code, seen.stdout) == (3, "over http\n")

        async with aiohttp.ClientSession() as anon:
            for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": token.reveal()}):
                async with anon.post(url + "/execute", json={"command": "touch pwned"}, headers=headers) as r:
                    assert r.status == 401, headers
                async with anon.get(url + "/download/notes%2Fa.txt", headers=headers) as r:
                    assert r.status == 401, headers
            async with anon.get(url + "/") as r:
                assert (r.status, await r.json()) == (200, {"status": "ok"})
        assert not (await sandbox.files.exists("pwned"))

        async with p.sessions(api=node_api, transport="http") as second:
            again = await second.connect(sandbox.id)
            other_url, other_token = second.route(sandbox.id)
            assert other_url == url
            assert other_token.reveal() != token.reveal()
            assert await again.files.read("notes/a.txt") == b"over http\n"
            assert (await again.commands.run(["sh", "-c", "echo $GREETING"])).stdout == "hello\n"
            await again.disconnect()
            await second.release()  # the session lives on: the first holder closes it
        assert (await sandbox.commands.run(["true"])).exit_code == 0  # the first token still admitted

        scanned = await api_scan.objects_text(node_api, [node_ns], logs=[(node_ns, sandbox.id)])
        for secret in (token.reveal(), other_token.reveal()):
            assert secret not in scanned
        await sandbox.close()
        await first.aclose()

    async def gone() -> bool:
        pods = (await node_api.list(k8s.PODS, node_ns)).items
        return not pods and container not in await node_containers.tasks(real_node)

    await eventually(gone, limit_s=90, interval_s=0.5, what=f"session pod {sandbox.id} gone from the API and the node")


async def test_serve_forwards_to_the_pods_runtime_and_an_idle_session_ends_itself(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    """``sandbox serve``'s application over HTTP sessions: the legacy API through it reaches the
    pod's runtime by its URL (with the session's token, never the client's); and a session opened
    with an idle timeout is ended by its runtime (it counts every holder's requests), then its pod
    deleted by the opener's watcher."""
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    server_token = "serve-test-token-0123456789"
    with inside_node_network(real_node):
        sessions = p.sessions(api=node_api, transport="http")
        runner = web.AppRunner(router_app.build_app(sessions, Secret(server_token)), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)  # the node's loopback: this thread is in its network
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            sandbox = await sessions.open(OpenOptions(ttl=300, idle_timeout=4))
            assert sessions.route(sandbox.id)[0].startswith("http://")
            headers = {"Authorization": f"Bearer {server_token}", "X-Sandbox-ID": sandbox.id}
            body = {"command": "echo routed"}
            async with aiohttp.ClientSession() as http, http.post(url + "/execute", json=body, headers=headers) as r:
                assert (r.status, (await r.json())["stdout"]) == (200, "routed\n")
            await sandbox.disconnect()

            async def pod_gone() -> bool:
                return not (await node_api.list(k8s.PODS, node_ns)).items

            await eventually(pod_gone, limit_s=60, interval_s=0.5, what="the idle session's pod deleted")
            assert sessions.held() == []
        finally:
            await runner.cleanup()
            await sessions.aclose()
