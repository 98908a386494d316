"""The upstream agent-sandbox SDK (``k8s-agent-sandbox``, pinned in the test extra) against a real
``ironflow sandbox serve``: the same calls it makes to a cluster's Sandbox Router, unchanged.

How the SDK is pointed at the server, with no cluster: ``tests/sessions/integration/upstream_sdk.py``.
``SandboxClient.create_sandbox`` is not used: creating a session is ironflow's own
``sandbox open``, as creating a claim is the cluster's.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from tests.sessions.integration.serving import TOKEN, Served, ironflow
from tests.sessions.integration.upstream_sdk import direct_config, upstream_sandbox

from ironflow.testing.processes import descendants, running

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def test_the_upstream_sdk_runs_commands_and_moves_files_through_sandbox_serve(served: Served) -> None:
    opened = ironflow("sandbox", "open", "--server", served.url, "-o", "json", env=served.env)
    assert opened.returncode == 0, opened.stderr
    sandbox_id = json.loads(opened.stdout)["id"]
    session_pids = descendants(served.proc.pid)
    assert session_pids, "the session's sandbox runs under the server"

    config = direct_config(served.url, TOKEN)
    assert TOKEN not in repr(config)
    with upstream_sandbox(config, sandbox_id) as sandbox:
        result = sandbox.commands.run("sh -c 'echo from-sdk; echo oops >&2; exit 3'")
        assert (result.stdout, result.stderr, result.exit_code) == ("from-sdk\n", "oops\n", 3)
        assert sandbox.commands.run("id -u").stdout == "10001\n"
        sandbox.files.write("notes/hello.txt", b"written by the SDK")
        assert sandbox.files.read("notes/hello.txt") == b"written by the SDK"
        assert [(e.name, e.type, e.size) for e in sandbox.files.list("notes")] == [("hello.txt", "file", 18)]
        assert sandbox.files.exists("notes/hello.txt")
        assert not sandbox.files.exists("notes/missing.txt")
        assert sandbox.commands.run("cat notes/hello.txt").stdout == "written by the SDK"

    closed = ironflow("sandbox", "close", sandbox_id, env=served.env)
    assert closed.returncode == 0, closed.stderr
    assert closed.stdout.strip() == f"closed {sandbox_id}"
    deadline = time.monotonic() + 5
    while any(running(pid) for pid in session_pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in session_pids), "no process of the session is left"
    assert descendants(served.proc.pid) == set()
    listed = ironflow("sandbox", "ls", "-o", "json", env=served.env)
    assert json.loads(listed.stdout) == []
    assert served.stop() == 0
