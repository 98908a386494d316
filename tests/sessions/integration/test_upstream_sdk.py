"""The upstream agent-sandbox SDK (``k8s-agent-sandbox``, pinned in the test extra) against a real
``ironflow sandbox serve``: the same calls it makes to a cluster's Sandbox Router, unchanged.

How the SDK is pointed at the server, with no cluster: its ``Sandbox`` takes a
``SandboxDirectConnectionConfig(api_url=…, extra_headers=…)`` and sends the router headers
itself. Two things keep it off a Kubernetes API, each through a constructor argument or a
documented method rather than a patch: ``K8sHelper(api_client=ApiClient())`` (an explicit
client, so no kubeconfig is loaded), and a subclass whose ``get_pod_ip`` returns None (the
SDK asks it before every request, for an ``X-Sandbox-Pod-IP`` hint; a local server has no
pod IP, and the default would query the API). Nothing of the SDK's private state is touched.
``SandboxClient.create_sandbox`` is not used: creating a session is ironflow's own
``sandbox open``, as creating a claim is the cluster's.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from tests.sessions.integration.serving import TOKEN, Served, descendants, ironflow, running

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

sdk_sandbox = pytest.importorskip("k8s_agent_sandbox.sandbox", reason="pip install k8s-agent-sandbox==1.0.8")
sdk_helper = pytest.importorskip("k8s_agent_sandbox.k8s_helper", reason="pip install k8s-agent-sandbox==1.0.8")
sdk_models = pytest.importorskip("k8s_agent_sandbox.models", reason="pip install k8s-agent-sandbox==1.0.8")
kubernetes = pytest.importorskip("kubernetes")


class RoutedSandbox(sdk_sandbox.Sandbox):  # type: ignore[misc, name-defined]
    """The SDK's Sandbox, told that there is no pod IP to hint (there is no pod)."""

    def get_pod_ip(self) -> str | None:
        return None


def test_the_upstream_sdk_runs_commands_and_moves_files_through_sandbox_serve(served: Served) -> None:
    opened = ironflow("sandbox", "open", "--server", served.url, "-o", "json", env=served.env)
    assert opened.returncode == 0, opened.stderr
    sandbox_id = json.loads(opened.stdout)["id"]
    session_pids = descendants(served.proc.pid)
    assert session_pids, "the session's sandbox runs under the server"

    api_client = kubernetes.client.ApiClient()
    config = sdk_models.SandboxDirectConnectionConfig(
        api_url=served.url, extra_headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert TOKEN not in repr(config)
    sandbox = RoutedSandbox(
        claim_name=sandbox_id,
        sandbox_id=sandbox_id,
        connection_config=config,
        k8s_helper=sdk_helper.K8sHelper(api_client=api_client),
    )
    try:
        result = sandbox.commands.run("sh -c 'echo from-sdk; echo oops >&2; exit 3'")
        assert (result.stdout, result.stderr, result.exit_code) == ("from-sdk\n", "oops\n", 3)
        assert sandbox.commands.run("id -u").stdout == "10001\n"
        sandbox.files.write("notes/hello.txt", b"written by the SDK")
        assert sandbox.files.read("notes/hello.txt") == b"written by the SDK"
        assert [(e.name, e.type, e.size) for e in sandbox.files.list("notes")] == [("hello.txt", "file", 18)]
        assert sandbox.files.exists("notes/hello.txt")
        assert not sandbox.files.exists("notes/missing.txt")
        assert sandbox.commands.run("cat notes/hello.txt").stdout == "written by the SDK"
    finally:
        sandbox.close_connection()
        api_client.close()

    closed = ironflow("sandbox", "close", sandbox_id, env=served.env)
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.strip() == f"closed {sandbox_id}"
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in session_pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in session_pids), "no process of the session is left"
    assert descendants(served.proc.pid) == []
    listed = ironflow("sandbox", "ls", "-o", "json", env=served.env)
    assert json.loads(listed.stdout) == []
    assert served.stop() == 0
