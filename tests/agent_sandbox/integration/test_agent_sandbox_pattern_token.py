"""The token a proxied pattern's agent waits for, run for real: the delivery exec's command and
the pattern pod's own script (its rendered container, in bubblewrap with the pod's volumes)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from tests.fakes import pod_exec

from ironflow.agent_sandbox import catalog, deliveries, patterns
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.testing.polling import eventually_sync

PROXY = "http://ironflow-auth-proxy.ironflow.svc:8080"
TOKEN = b"ifap_delivered_after_start_1"
#: An env with a HOME, as the pod's container and kwok's exec get one.
PATH = "/usr/local/bin:/usr/bin:/bin"


def deliver(home: Path, token: bytes) -> None:
    """What ``deliver_token``'s exec runs in the pod: the write command, the token as stdin."""
    argv = deliveries.write_file_command(deliveries.PROXY_TOKEN_FILE, len(token))
    subprocess.run(argv, input=token, env={"HOME": str(home), "PATH": PATH}, check=True, timeout=30)


def test_agent_without_a_delivered_token_gives_up_with_a_message(tmp_path: Path) -> None:
    script = deliveries.token_wait_prefix(PROXY, wait_s=1) + "echo ran"
    done = subprocess.run(
        ["sh", "-c", script], env={"HOME": str(tmp_path), "PATH": PATH}, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == deliveries.TOKEN_WAIT_EXIT
    assert "no proxy token reached this sandbox within 1s" in done.stderr
    assert "ran" not in done.stdout


def test_delivered_file_is_private_and_read_whole(tmp_path: Path) -> None:
    deliver(tmp_path, TOKEN)
    token_file = tmp_path / deliveries.TOKEN_DIR / deliveries.PROXY_TOKEN_FILE
    assert token_file.read_bytes() == TOKEN
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert not token_file.with_name(token_file.name + ".part").exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
@pytest.mark.parametrize("pattern", ["ephemeral", "standalone-pvc"])
def test_pattern_pod_agent_runs_with_the_token_delivered_after_the_pod_started(tmp_path: Path, pattern: str) -> None:
    """The Sandbox's pod as rendered, its agent a stand-in printing what it got: it waits, takes
    the token from the file the delivery wrote into its HOME, and the file is gone after."""
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "claude").write_text('#!/bin/sh\necho "token=$ANTHROPIC_AUTH_TOKEN url=$ANTHROPIC_BASE_URL"\n')
    (fake / "claude").chmod(0o755)
    provider = K8sEphemeralProvider.sandboxed("ghcr.io/acme/runner:1").auth_proxy(PROXY).claude_path("/opt/fake/claude")
    objects = catalog.render_pattern(pattern, patterns.PatternOptions(provider=provider))
    (sandbox,) = (o for o in objects if o["kind"] == "Sandbox")
    pod = {"spec": sandbox["spec"]["podTemplate"]["spec"]}
    claims = {}
    for claim in (o for o in objects if o["kind"] == "PersistentVolumeClaim"):
        claims[claim["metadata"]["name"]] = tmp_path / claim["metadata"]["name"]
        claims[claim["metadata"]["name"]].mkdir()
    root = tmp_path / "pod"
    runs: list[pod_exec.PodRun] = []
    thread = threading.Thread(
        target=lambda: runs.append(
            pod_exec.run_pod(pod, root, extra_binds={str(fake): "/opt/fake"}, claims=claims, timeout_s=60)
        )
    )
    thread.start()
    home = root / "ironflow-home"  # the pod's emptyDir HOME, as run_pod lays it out
    eventually_sync(home.exists, limit_s=30, what="the pod's HOME volume")
    deliver(home, TOKEN)
    thread.join(timeout=90)
    (run,) = runs
    assert run.exit_code == 0, run.log
    assert f"token={TOKEN.decode()} url={PROXY}" in run.log
    assert not (home / deliveries.TOKEN_DIR / deliveries.PROXY_TOKEN_FILE).exists()
