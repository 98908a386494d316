"""Pause, resume and idle suspend of Kubernetes sessions on the real kube-apiserver with kwok
(``cases.py``): a paused session's pod is deleted and its workspace waits in the snapshot store;
it stays listed, paused; a resume makes a new pod for the same id with the same labels, run and
environment and unpacks the workspace into it (bytes and modes); any request, a connect from
another process, and the next request after an idle suspend resume it first; an unknown id is one
line. kwok runs every exec of a case in one host directory shared by all its pods, so each test
wipes it while the session is paused: what comes back came from the archive. The real node's
variant (its own files per pod, its processes gone) is
``tests/k8s/real_node/test_real_node_session_pauses.py``.
"""

from __future__ import annotations

import asyncio
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sessions.integration.cases import SessionCase, open_case, wipe

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.sessions import OpenOptions
from ironflow.sessions.values import SessionNotFound
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually
from ironflow.workspaces import Workspace


def _k8s(case: SessionCase) -> K8sSessions:
    assert isinstance(case.sessions, K8sSessions)
    return case.sessions


@pytest.fixture
async def case(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SessionCase]:
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_DIR", str(tmp_path / "store"))  # the sessions' default store
    async with open_case(request, "k8s-real-apiserver", tmp_path) as opened:
        yield opened


async def _pod_uid(case: SessionCase, session_id: str) -> str | None:
    assert case.api is not None
    try:
        pod = await case.api.get(kube.PODS, case.namespace, session_id)
    except errors.KubeNotFound:
        return None
    return None if pod["metadata"].get("deletionTimestamp") else str(pod["metadata"]["uid"])


def _other(case: SessionCase) -> K8sSessions:
    """The namespace's sessions as another process sees them (nothing held)."""
    assert case.api is not None
    return K8sEphemeralProvider(ProviderSettings(image="runner:test", namespace=case.namespace)).sessions(api=case.api)


async def test_a_paused_sessions_pod_goes_and_its_resume_brings_back_its_files_labels_and_env(
    case: SessionCase,
) -> None:
    work = Path(case.work_dir)
    sandbox = await case.open(OpenOptions(ttl=120, labels={"team": "a"}, run_id="run-9", env={"B": "2"}))
    await sandbox.files.write("notes/kept.txt", "written before the pause\n")
    made = await sandbox.commands.run(["sh", "-c", "chmod 640 notes/kept.txt && printf x > run.sh && chmod 751 run.sh"])
    assert made.exit_code == 0, made
    first = await _pod_uid(case, sandbox.id)
    assert first is not None

    paused = await _k8s(case).pause(sandbox.id)
    assert (paused.id, paused.paused, paused.labels, paused.run_id) == (sandbox.id, True, {"team": "a"}, "run-9")

    async def pod_gone() -> bool:
        return await _pod_uid(case, sandbox.id) is None

    await eventually(pod_gone, interval_s=0.1, what="the paused session's pod deleted")
    listed = {info.id: info for info in await _k8s(case).list()}
    assert listed[sandbox.id].paused is True  # still listed, paused
    assert [info.id for info in await _k8s(case).find(run_id="run-9")] == [sandbox.id]
    assert [s.name for s in await _k8s(case).snapshots()] == [f"paused-{sandbox.id}"]
    assert (await _k8s(case).pause(sandbox.id)).paused is True  # pausing twice is no error
    wipe(work)

    resumed = await _k8s(case).resume(sandbox.id)
    assert (resumed.id, resumed.paused) == (sandbox.id, False)
    second = await _pod_uid(case, sandbox.id)
    assert second not in (None, first)  # a new pod for the same id
    assert (work / "notes" / "kept.txt").read_text() == "written before the pause\n"
    assert stat.S_IMODE((work / "notes" / "kept.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((work / "run.sh").stat().st_mode) == 0o751
    assert (await sandbox.commands.run(["sh", "-c", "echo $B"])).stdout == "2\n"  # the same environment
    pod = await case.api.get(kube.PODS, case.namespace, sandbox.id) if case.api else {}
    assert pod["metadata"]["labels"]["team"] == "a"
    assert await _k8s(case).snapshots() == []  # the archive went with the resume
    assert (await _k8s(case).resume(sandbox.id)).paused is False  # resuming a running one is no error
    assert not [info for info in await _k8s(case).list() if info.paused]

    await sandbox.close()
    await eventually(case.nothing_left, interval_s=0.1, what="the session's pod gone")


async def test_a_request_to_a_paused_session_resumes_it_first(case: SessionCase) -> None:
    work = Path(case.work_dir)
    sandbox = await case.open(OpenOptions(ttl=120))
    await sandbox.files.write("kept.txt", "kept")
    await _k8s(case).pause(sandbox.id)
    wipe(work)
    ran = await sandbox.commands.run(["cat", "kept.txt"])  # the handle's request resumes it
    assert (ran.exit_code, ran.stdout) == (0, "kept")
    assert await _pod_uid(case, sandbox.id) is not None
    assert not (await _k8s(case).list())[0].paused
    await sandbox.close()
    assert await _k8s(case).snapshots() == []


async def test_another_process_pauses_by_id_and_its_connect_resumes_it(case: SessionCase) -> None:
    work = Path(case.work_dir)
    sandbox = await case.open(OpenOptions(ttl=120))
    await sandbox.files.write("kept.txt", "kept")
    await sandbox.disconnect()
    pauser = _other(case)
    try:
        assert (await pauser.pause(sandbox.id)).paused is True
    finally:
        await pauser.release()  # let go, never closed: the session lives on, paused
    wipe(work)
    async with _other(case) as later:
        assert [(i.id, i.paused) for i in await later.list()] == [(sandbox.id, True)]
        again = await later.connect(sandbox.id)  # a request is coming: resumed first
        assert await again.files.read("kept.txt") == b"kept"
        await again.close()
    await eventually(case.nothing_left, interval_s=0.1, what="the session's pod gone")
    assert await _k8s(case).snapshots() == []


async def test_an_idle_session_is_suspended_and_its_next_request_resumes_it(case: SessionCase) -> None:
    work = Path(case.work_dir)
    sandbox = await case.open(OpenOptions(ttl=120, idle_suspend=1.0))
    await sandbox.files.write("kept.txt", "kept through an idle suspend")

    async def suspended() -> bool:
        return await _pod_uid(case, sandbox.id) is None and (await _k8s(case).list())[0].paused

    await eventually(suspended, limit_s=30, interval_s=0.2, what="the idle session suspended")
    wipe(work)
    assert await sandbox.files.read("kept.txt") == b"kept through an idle suspend"
    assert await _pod_uid(case, sandbox.id) is not None
    await sandbox.close()
    await eventually(case.nothing_left, interval_s=0.1, what="the session's pod gone")
    assert await _k8s(case).snapshots() == []


async def test_closing_a_paused_session_removes_its_archive(case: SessionCase) -> None:
    sandbox = await case.open(OpenOptions(ttl=120))
    await _k8s(case).pause(sandbox.id)
    assert await _k8s(case).close(sandbox.id)
    assert await _k8s(case).snapshots() == []
    assert await _k8s(case).list() == []
    async with _other(case) as other:
        with pytest.raises(SessionNotFound):
            await other.resume(sandbox.id)
        assert not await other.close(sandbox.id)


async def test_pause_or_resume_of_an_unknown_id_is_one_line(case: SessionCase) -> None:
    for act in (_k8s(case).pause, _k8s(case).resume):
        with pytest.raises(SessionNotFound) as caught:
            await act("sbx-0000000000000000")
        assert caught.value.message == f"no open sandbox session 'sbx-0000000000000000' in {case.namespace}"
    assert await _k8s(case).snapshots() == []


async def test_idle_suspend_of_a_session_a_pause_could_not_bring_back_is_refused_before_any_pod(
    case: SessionCase,
) -> None:
    clone = OpenOptions(ttl=60, idle_suspend=5, workspace=Workspace("https://git.example.test/o/r.git"))
    with pytest.raises(errors.ConfigError) as caught:
        await case.open(clone)
    assert caught.value.message.startswith("a Kubernetes session with a git workspace cannot take idle suspend")
    assert "\n" not in caught.value.message
    assert await case.nothing_left()


async def test_a_pause_past_the_stores_limit_is_refused_and_the_session_runs_on(
    case: SessionCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IRONFLOW_SNAPSHOT_LIMIT", "64K")  # read when the sessions first use their store
    sandbox = await case.open(OpenOptions(ttl=120))
    await sandbox.files.write("big", b"x" * 200_000)
    with pytest.raises(errors.WorkspaceRefused, match=r"past the store's limit \(65536 bytes left\)"):
        await _k8s(case).pause(sandbox.id)
    assert await _pod_uid(case, sandbox.id) is not None
    assert [info.paused for info in await _k8s(case).list()] == [False]
    assert (await sandbox.commands.run(["wc", "-c", "big"])).stdout.split()[0] == "200000"  # it runs on
    assert await _k8s(case).snapshots() == []
    await sandbox.close()


async def test_a_resume_whose_pod_is_deleted_before_it_runs_fails_in_one_line_and_the_session_stays_paused(
    case: SessionCase, kube_env: KubeEnv
) -> None:
    assert case.api is not None
    api = case.api
    sandbox = await case.open(OpenOptions(ttl=120))
    await sandbox.files.write("kept.txt", "kept")
    await _k8s(case).pause(sandbox.id)
    with kube_env.stopped("kwok"):  # the resumed pod stays Pending: its delete meets the resume's wait
        request = asyncio.create_task(sandbox.commands.run(["cat", "kept.txt"]))

        async def made() -> bool:
            return await _pod_uid(case, sandbox.id) is not None

        await eventually(made, limit_s=60, what="the resumed pod made")
        await api.delete(kube.PODS, case.namespace, sandbox.id, grace_period_seconds=0)
        with pytest.raises(errors.SandboxFailed) as caught:
            await request
    said = caught.value.message
    assert said == f"session pod {sandbox.id} cannot start: Deleted: it was deleted before it ran (retryable)"
    assert [info.paused for info in await _k8s(case).list()] == [True]  # its files wait in the store
    ran = await sandbox.commands.run(["cat", "kept.txt"])  # the next request resumes it
    assert (ran.exit_code, ran.stdout) == (0, "kept")
    await sandbox.close()
    assert await _k8s(case).snapshots() == []
