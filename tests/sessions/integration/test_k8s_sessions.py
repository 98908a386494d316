"""What only Kubernetes sessions have, on the test server and the real kube-apiserver with kwok
(``cases.py``): another process reattaches by id from the pod's labels, a pod its supervisor
lost goes in one reaper pass once its TTL passed, an upload past the limit never reaches the
pod, and an image without Python fails the open and leaves no pod. The contract every backend
keeps is ``test_session_contract.py``."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sessions.integration.cases import SessionCase, open_case

from ironflow import errors
from ironflow.k8s import reaper, session_bridge
from ironflow.k8s.sessions import K8sSessions
from ironflow.testing.polling import eventually


@pytest.fixture(params=["k8s-test-server", "k8s-real-apiserver"])
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionCase]:
    async with open_case(request, request.param, tmp_path) as opened:
        yield opened


def _another(
    case: SessionCase, *, max_upload_bytes: int = session_bridge.DEFAULT_MAX_UPLOAD_BYTES, python: str = "python3"
) -> K8sSessions:
    """A second holder of the same namespace's sessions, as another process would be."""
    assert isinstance(case.sessions, K8sSessions)
    return K8sSessions(case.sessions.settings, api=case.api, max_upload_bytes=max_upload_bytes, python=python)


async def test_another_process_reattaches_by_id_and_closes_it(case: SessionCase) -> None:
    first = _another(case)
    sandbox = await first.open(ttl=60, env={"KEPT": "yes"}, labels={"team": "a"}, run_id="run-9")
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
    sandbox = await lost.open(ttl=30)
    await sandbox.disconnect()
    await lost.release()  # as after a SIGKILL: nothing of this process will delete the pod
    early = await reaper.reap_namespace(case.api, case.namespace)
    assert sandbox.id not in early.pods
    after = math.ceil(sandbox.info.expires_at) + 1
    report = await reaper.reap_namespace(case.api, case.namespace, now=after)
    assert report.pods == (sandbox.id,)
    await eventually(case.nothing_left, interval_s=0.1, what="the pod reaped")


async def test_an_upload_past_the_limit_is_refused_before_it_reaches_the_pod(case: SessionCase) -> None:
    async with _another(case, max_upload_bytes=1000) as small, await small.open(ttl=60) as sandbox:
        with pytest.raises(errors.ConfigError, match="exceeds the limit of 1000 bytes"):
            await sandbox.files.write("big", b"x" * 5000)
        assert not await sandbox.files.exists("big")


async def test_an_image_without_python_fails_the_open_and_leaves_no_pod(case: SessionCase) -> None:
    sessions = _another(case, python="no-such-python")
    with pytest.raises(errors.SandboxError, match=r"could not run the runtime|did not answer"):
        await sessions.open(ttl=60)
    assert await case.nothing_left()
    await sessions.aclose()
