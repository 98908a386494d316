"""Kubernetes sessions on real pods: ``provider.sessions()`` opens a hardened pod of the runner image
on the real node (runc, and gVisor), the session runtime starts in it over the API server's exec
(the fallback transport: this test's process is outside the node's network),
a command runs as uid 10001 in it, a file written through the session is read back and is seen
by a command, and closing deletes the pod and ends its container's process on the node.

The kwok tier (``tests/sessions/integration``) runs the runtime on this host; here it runs in
the container. Skipped when the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import pytest
from tests.fakes import node_containers
from tests.sessions.integration.screens import drive_the_repl

from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.sessions import OpenOptions
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(480)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_session_on_a_real_pod_runs_commands_keeps_files_and_goes_on_close(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    if runtime == "gvisor":
        p = p.runtime_class("gvisor")
    async with p.sessions(api=node_api, transport="exec") as sessions:  # HTTP: test_real_node_session_runtime.py
        sandbox = await sessions.open(OpenOptions(ttl=300, env={"GREETING": "hello"}))
        pod = await node_api.get(k8s.PODS, node_ns, sandbox.id)
        container = node_containers.running_container(pod)
        assert container is not None, pod["status"]
        assert container in await node_containers.tasks(real_node)

        ran = await sandbox.commands.run(["sh", "-c", "id -u; echo $GREETING; uname -r"])
        assert ran.exit_code == 0, ran
        uid, greeting, kernel = ran.stdout.splitlines()
        assert (uid, greeting) == ("10001", "hello")
        assert kernel.endswith("-gvisor") is (runtime == "gvisor"), kernel

        await sandbox.files.write("notes/a.txt", "written through the session\n")
        assert await sandbox.files.read("notes/a.txt") == b"written through the session\n"
        seen = await sandbox.commands.run(["sh", "-c", "cat notes/a.txt; exit 3"])
        assert (seen.exit_code, seen.stdout) == (3, "written through the session\n")

        await sandbox.close()

    async def gone() -> bool:
        pods = (await node_api.list(k8s.PODS, node_ns)).items
        return not pods and container not in await node_containers.tasks(real_node)

    await eventually(gone, limit_s=90, interval_s=0.5, what=f"session pod {sandbox.id} gone from the API and the node")


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_pty_command_on_a_real_pod_is_typed_into_resized_and_interrupted(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    """The runner image's ``python3`` REPL in a pty the pod's runtime opened (the container's own
    devpts): keys and a resize down the command's exec, Ctrl-C a KeyboardInterrupt, the REPL lives on."""
    p = K8sEphemeralProvider.sandboxed(need_image["runner"]).namespace(node_ns).image_pull_policy("Never")
    if runtime == "gvisor":
        p = p.runtime_class("gvisor")
    exec_only = p.sessions(api=node_api, transport="exec")  # this process is outside the node's network
    async with exec_only as sessions, await sessions.open(OpenOptions(ttl=300)) as sandbox:
        handle = await sandbox.commands.start(["python3", "-q"], pty=True, cols=90, rows=20)
        await drive_the_repl(handle)
