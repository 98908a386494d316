"""What only Kubernetes sessions have, on the test server and the real kube-apiserver with kwok
(``cases.py``): another process reattaches by id from the pod's labels, a pod its supervisor
lost goes in one reaper pass once its TTL passed, an upload past the limit never reaches the
pod, an image without Python fails the open and leaves no pod, and a pod that will never
start (a missing Secret) fails it at once with the cluster's reason. The contract every backend
keeps is ``test_session_contract.py``."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.kubelet_problems import problem_status
from tests.sessions.integration.cases import SessionCase, open_case
from tests.sessions.integration.screens import Screen, drive_the_repl

from ironflow import errors
from ironflow.k8s import reaper
from ironflow.k8s.sessions import bridge
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.sessions import Exit, OpenOptions
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.polling import eventually

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["k8s-test-server", "k8s-real-apiserver"])
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionCase]:
    async with open_case(request, request.param, tmp_path) as opened:
        yield opened


def _another(
    case: SessionCase, *, max_upload_bytes: int = bridge.DEFAULT_MAX_UPLOAD_BYTES, python: str = "python3"
) -> K8sSessions:
    """A second holder of the same namespace's sessions, as another process would be."""
    assert isinstance(case.sessions, K8sSessions)
    return K8sSessions(case.sessions.settings, api=case.api, max_upload_bytes=max_upload_bytes, python=python)


async def test_another_process_reattaches_by_id_and_closes_it(case: SessionCase) -> None:
    first = _another(case)
    sandbox = await first.open(OpenOptions(ttl=60, env={"KEPT": "yes"}, labels={"team": "a"}, run_id="run-9"))
    await sandbox.files.write("x", "1")
    await sandbox.disconnect()
    await first.release()  # the supervisor lets go: the pod lives on to its TTL
    assert await case.leftovers() == [f"pod {sandbox.id}"]
    async with _another(case) as second:
        (found,) = await second.find(run_id="run-9")
        assert (found.id, found.labels, found.run_id, found.backend) == (sandbox.id, {"team": "a"}, "run-9", "k8s")
        assert abs(found.expires_at - sandbox.info.expires_at) <= 1
        again = await second.connect(sandbox.id)
        assert await again.files.read("x") == b"1"
        assert (await again.commands.run(["sh", "-c", "echo $KEPT"])).stdout == "yes\n"
        await again.close()
    assert await case.nothing_left()


async def test_a_lost_supervisors_pod_goes_in_one_reaper_pass_after_its_ttl(case: SessionCase) -> None:
    assert case.api is not None
    lost = _another(case)
    sandbox = await lost.open(OpenOptions(ttl=30))
    await sandbox.disconnect()
    await lost.release()  # as after a SIGKILL: nothing of this process will delete the pod
    early = await reaper.reap_namespace(case.api, case.namespace)
    assert sandbox.id not in early.pods
    after = math.ceil(sandbox.info.expires_at) + 1
    report = await reaper.reap_namespace(case.api, case.namespace, now=after)
    assert report.pods == (sandbox.id,)
    await eventually(case.nothing_left, interval_s=0.1, what="the pod reaped")


_SUPERVISOR = """
import asyncio, json, sys
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube.clusters import KubeconfigFile
from ironflow.sessions import Exit, OpenOptions
async def main():
    cluster = KubeconfigFile(sys.argv[1])
    provider = K8sEphemeralProvider(ProviderSettings(image="runner:test", namespace=sys.argv[2], cluster=cluster))
    sessions = provider.sessions()
    sandbox = await sessions.open(OpenOptions(ttl=30))
    print(json.dumps({"id": sandbox.id, "expires_at": sandbox.info.expires_at}), flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


async def test_after_a_sigkill_of_the_supervisor_one_reaper_pass_past_the_ttl_leaves_nothing(
    case: SessionCase, tmp_path: Path
) -> None:
    """The supervisor dies with the session open: its pod stays (to its TTL), no socket of it is
    left on this host (the bridge's is abstract), and one reaper pass past the TTL deletes it."""
    assert case.api is not None
    assert case.kubeconfig is not None
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "TMPDIR": str(scratch)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SUPERVISOR, str(case.kubeconfig), case.namespace, stdout=asyncio.subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            doc = json.loads(await proc.stdout.readline())
    finally:
        proc.kill()
        await proc.wait()
    assert await case.leftovers() == [f"pod {doc['id']}"]
    assert [p for p in scratch.rglob("*") if p.is_socket()] == []  # the bridge's socket was abstract
    report = await reaper.reap_namespace(case.api, case.namespace, now=math.ceil(doc["expires_at"]) + 1)
    assert report.pods == (doc["id"],)
    await eventually(case.nothing_left, interval_s=0.1, what="the pod reaped")


async def test_an_upload_past_the_limit_is_refused_before_it_reaches_the_pod(case: SessionCase) -> None:
    async with _another(case, max_upload_bytes=1000) as small, await small.open(OpenOptions(ttl=60)) as sandbox:
        with pytest.raises(errors.ConfigError, match="exceeds the limit of 1000 bytes"):
            await sandbox.files.write("big", b"x" * 5000)
        assert not await sandbox.files.exists("big")


async def test_an_image_without_python_fails_the_open_and_leaves_no_pod(case: SessionCase) -> None:
    sessions = _another(case, python="no-such-python")
    with pytest.raises(errors.SandboxError, match=r"could not run the runtime|did not answer"):
        await sessions.open(OpenOptions(ttl=60))
    assert await case.nothing_left()
    await sessions.aclose()


async def test_a_pod_that_will_never_start_fails_the_open_at_once_and_is_deleted(tmp_path: Path) -> None:
    """The pod steps' fail-fast wait: a missing Secret is the cluster's reason at once, not a
    wait to the start timeout; the pod is deleted."""
    async with KubeTestServer() as server:
        server.create_namespace("ff")
        client = await kube.KubeApi.connect(server.cluster_config())
        settings = ProviderSettings(image="runner:test", namespace="ff")
        async with client, K8sSessions(settings, api=client, start_timeout_s=60) as sessions:
            opening = asyncio.create_task(sessions.open(OpenOptions(ttl=60)))
            (pod,) = await eventually(lambda: server.objects(kube.PODS, "ff"), what="the session pod")
            problem = problem_status(pod, "CreateContainerConfigError", 'secret "claude-token" not found')
            server.set_pod_status("ff", pod["metadata"]["name"], problem)
            started = time.monotonic()
            with pytest.raises(errors.SandboxRefused, match="CreateContainerConfigError"):
                await opening
            assert time.monotonic() - started < 10
            assert server.objects(kube.PODS, "ff") == []


async def test_a_pty_command_in_the_pod_is_typed_into_resized_interrupted_and_found_again(
    case: SessionCase,
) -> None:
    """The pod's runtime runs the REPL in a pty; stdin writes and resizes go down the command's own
    exec, a second handle finds it by id, and Ctrl-C interrupts it there."""
    async with _another(case) as sessions, await sessions.open(OpenOptions(ttl=60)) as sandbox:
        handle = await sandbox.commands.start(["python3", "-q"], pty=True, cols=90, rows=20)
        await drive_the_repl(handle, keys=await sandbox.commands.connect(handle.id))
        with pytest.raises(errors.ConfigError, match="has ended"):
            await handle.send_stdin("late")
        with pytest.raises(FileNotFoundError):
            await sandbox.commands.connect("c999")


async def test_stdin_and_signals_reach_a_command_in_the_pod(case: SessionCase) -> None:
    async with _another(case) as sessions, await sessions.open(OpenOptions(ttl=60)) as sandbox:
        cat = await sandbox.commands.start(["cat"], keep_stdin=True)
        screen = Screen(cat)
        await cat.send_stdin("one\n")
        await screen.until("one\n")
        await cat.send_stdin("two", eof=True)
        assert await screen.exit() == Exit(0, False)
        assert screen.text == "one\ntwo"
        sleep = await sandbox.commands.start(["sleep", "60"])
        with pytest.raises(errors.ConfigError, match="unknown signal 'NOPE'") as bad:
            await sleep.signal("NOPE")
        assert "\n" not in bad.value.message
        with pytest.raises(errors.ConfigError, match="stdin is closed"):
            await sleep.send_stdin("x")
        with pytest.raises(errors.ConfigError, match="no terminal"):
            await sleep.resize(80, 24)
        assert await sleep.signal("TERM") is True
        assert (await sleep.wait(30)).exit_code == 128 + 15
        assert await sleep.signal("TERM") is False
