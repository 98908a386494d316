"""Agent steps on a cluster: launch, wait, logs, delete, finalize (§1.4, §1.9).

Each test runs on every ``kube`` backend (the in-process test server, a real kube-apiserver
whose kubelet is played by ``tests/fakes/kubelet.py``) unless it counts requests or injects
faults (those take ``server``). The pod logs are output captured from the real Claude Code
CLI (tests/fixtures/claude). Every test ends by checking that nothing is left.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.kubecase import KubeCase, hold_create_answers, names, nothing_left
from tests.fakes.proxy_tokens import MemoryIssuer

from ironflow import egress, errors, labels
from ironflow.auth_proxy import tokens
from ironflow.k8s import reaper
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing import find_leaks
from ironflow.testing.k8s_validate import validate_manifest
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
JSON_TEXT = (FIXTURES / "json_text.out").read_text()
API_ERROR = (FIXTURES / "json_api_error_529.out").read_text()
STREAM_TEXT = (FIXTURES / "stream_text.out").read_text()
RUN = "01a0e906-1f85-7000-8000-0000000000aa"
RUNNER_PODS = "claude-code"
FAR_FUTURE = 2**40


def provider(ns: str, *, timeout: float = 5) -> K8sEphemeralProvider:
    return K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(ns).timeout(timeout)


def runner(kube: KubeCase, p: K8sEphemeralProvider | None = None, **kwargs: Any) -> StepRunner:
    return StepRunner.of((p or provider(kube.namespace)).settings, api=kube.api, worker_env={}, **kwargs)


def phase_of(server: KubeTestServer, ns: str, name: str) -> str | None:
    pod = server.get_object(k8s.PODS, ns, name)
    return None if pod is None else pod.get("status", {}).get("phase")


async def step_objects_left(kube: KubeCase) -> None:
    await nothing_left(kube, k8s.PODS, k8s.CONFIGMAPS)


async def running_pod(kube: KubeCase) -> str:
    """The name of the namespace's one pod once it is Running."""

    async def running() -> str | None:
        pods = (await kube.api.list(k8s.PODS, kube.namespace)).items
        return next((p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Running"), None)

    name: str = await eventually(running, interval_s=0.05, what="the step's pod to run")
    return name


def leftovers(server: KubeTestServer, ns: str) -> list[str]:
    return [o["metadata"]["name"] for r in (k8s.PODS, k8s.CONFIGMAPS) for o in server.objects(r, ns)]


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))


# --- the happy path -----------------------------------------------------------------


async def test_invoke_runs_the_step_and_leaves_nothing(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.05, log=JSON_TEXT))
    created: list[dict[str, Any]] = []
    original = kube.api.create

    async def spy(resource: k8s.Resource, namespace: str | None, body: Any) -> dict[str, Any]:
        created.append(body)
        return await original(resource, namespace, body)

    kube.api.create = spy  # type: ignore[method-assign]
    result = await runner(kube).run(AgentConfig("Say hello").scoped(RUN, "greet"))
    assert result.text == "Hello from the fake model."
    assert result.session_id == "a988eb09-b85d-479d-b363-a28fcc17dc0a"
    await step_objects_left(kube)
    (pod,) = created
    validate_manifest(pod)
    assert pod["metadata"]["labels"][labels.LABEL_RUN_ID] == RUN
    assert labels.ANNOTATION_EXPIRES_AT in pod["metadata"]["annotations"]


async def test_invoke_uses_at_most_six_requests_per_step(kube: KubeCase, server: KubeTestServer) -> None:
    """Concurrent steps with run labels: cleanup lists, create, log read, delete; one shared watch."""
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.2, log=JSON_TEXT))
    server.reset_requests()
    steps = 5
    r = runner(kube)
    await asyncio.gather(*(r.run(AgentConfig("Say hello").scoped(RUN, f"s{i}")) for i in range(steps)))
    assert server.count("watch", "pods") == 1
    assert server.count("get", "pods") == 0  # no polling
    non_watch = len([x for x in server.requests if x.verb != "watch"])
    informer_list = 1  # the shared watch's initial list, once for all steps
    assert (non_watch - informer_list) / steps <= 6, [(x.verb, x.resource) for x in server.requests]


async def test_large_prompt_goes_through_a_configmap_deleted_with_the_pod(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.05, log=JSON_TEXT))
    calls: list[tuple[str, str]] = []
    create, delete = kube.api.create, kube.api.delete

    async def spy_create(resource: k8s.Resource, namespace: str | None, body: Any) -> dict[str, Any]:
        calls.append(("create", resource.plural))
        return await create(resource, namespace, body)

    async def spy_delete(resource: k8s.Resource, namespace: str | None, name: str, **kw: Any) -> Any:
        calls.append(("delete", resource.plural))
        return await delete(resource, namespace, name, **kw)

    kube.api.create = spy_create  # type: ignore[method-assign]
    kube.api.delete = spy_delete  # type: ignore[method-assign]
    result = await runner(kube).run(AgentConfig("x" * 120_000).scoped(RUN, "big"))
    assert result.text == "Hello from the fake model."
    assert calls.count(("create", "configmaps")) == 1
    assert calls.count(("delete", "configmaps")) == 1
    await step_objects_left(kube)


async def test_failed_pod_with_api_error_output_raises_api_error(kube: KubeCase) -> None:
    await kube.control.script_pods(
        PodScript(name_prefix=RUNNER_PODS, run_for=0.05, phase="Failed", exit_code=1, log=API_ERROR)
    )
    with pytest.raises(errors.ApiError) as caught:
        await runner(kube).run(AgentConfig("Say hello"))
    assert caught.value.status == 529
    assert caught.value.retryable
    await step_objects_left(kube)


async def test_failed_pod_without_output_is_process_failed(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.05, phase="Failed", log=""))
    with pytest.raises(errors.ProcessFailed, match="no output captured"):
        await runner(kube).run(AgentConfig("Say hello"))
    await step_objects_left(kube)


async def test_timeout_raises_agent_timeout_and_deletes(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    with pytest.raises(errors.AgentTimeout):
        await runner(kube, provider(kube.namespace, timeout=0.3)).run(AgentConfig("Say hello"))
    await step_objects_left(kube)


async def test_a_step_timeout_shorter_than_the_providers_ends_the_pod_at_the_steps_bound(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    started = time.monotonic()
    with pytest.raises(errors.AgentTimeout, match=r"\(the step's timeout\)") as caught:
        await runner(kube, provider(kube.namespace, timeout=120)).run(AgentConfig("Say hello").with_timeout(1))
    assert caught.value.bound == "step"
    assert time.monotonic() - started < 60  # the step's 1 s, far short of the provider's 120 s
    await step_objects_left(kube)


async def test_a_shorter_step_timeout_is_the_pods_deadline_too(kube: KubeCase) -> None:
    """Without the worker, the pod still ends at the step's bound (plus the margin), not the provider's."""
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    task = asyncio.create_task(
        runner(kube, provider(kube.namespace, timeout=600)).run(AgentConfig("hi").with_timeout(30))
    )
    name = await running_pod(kube)
    pod = await kube.api.get(k8s.PODS, kube.namespace, name)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    margin = pod["spec"]["activeDeadlineSeconds"] - 30
    assert 0 < margin < 600 - 30
    await step_objects_left(kube)


async def test_a_provider_timeout_shorter_than_the_steps_is_named_the_providers(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    with pytest.raises(errors.AgentTimeout, match=r"\(the provider's timeout\)"):
        await runner(kube, provider(kube.namespace, timeout=0.3)).run(AgentConfig("Say hello").with_timeout(120))
    await step_objects_left(kube)


async def test_refused_step_creates_nothing(kube: KubeCase, server: KubeTestServer) -> None:
    """Validation happens before any request: a reserved label fails with the reference's text."""
    server.reset_requests()
    with pytest.raises(errors.StepConfigError, match="is reserved"):
        await runner(kube).run(AgentConfig("hi").pod_label(labels.LABEL_COMPONENT, "x"))
    assert server.requests == []


async def test_deadline_exceeded_pod_is_a_failure_and_is_deleted(kube: KubeCase) -> None:
    """activeDeadlineSeconds kills the pod: the step fails with the kubelet's reason (retryable), nothing remains."""
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    p = provider(kube.namespace).active_deadline_seconds(1)
    with pytest.raises(errors.SandboxFailed, match=r"^pod \S+ failed: DeadlineExceeded: Pod was active") as caught:
        await runner(kube, p).run(AgentConfig("hi"))
    assert caught.value.retryable
    await step_objects_left(kube)


# --- streaming ------------------------------------------------------------------------


async def test_invoke_with_logs_streams_lines_as_they_arrive(kube: KubeCase) -> None:
    """Lines reach the sink as the container writes them; the step ends with the pod (on the real
    server too, where kwok's follow stream itself never ends: the runner ends on the phase)."""
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    sink = Lines()
    task = asyncio.ensure_future(runner(kube).run(AgentConfig("Say hello"), logs=sink))
    name = await running_pod(kube)
    first, *rest = STREAM_TEXT.splitlines(keepends=True)
    await kube.control.append_log(kube.namespace, name, first)
    await eventually(lambda: len(sink.lines) == 1)  # streamed before the pod ended
    assert not task.done()
    await kube.control.append_log(kube.namespace, name, "".join(rest))
    await eventually(lambda: len(sink.lines) == len(STREAM_TEXT.splitlines()))
    await kube.control.set_pod_phase(kube.namespace, name, "Succeeded")
    result = await task
    assert result.text
    assert all(stream == "stdout" for stream, _ in sink.lines)
    await step_objects_left(kube)


async def test_invoke_with_logs_on_an_already_finished_pod_sends_every_line(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.0, log=STREAM_TEXT))
    sink = Lines()
    result = await runner(kube).run(AgentConfig("Say hello"), logs=sink)
    assert [line for _, line in sink.lines] == STREAM_TEXT.splitlines()
    assert result.text
    await step_objects_left(kube)


async def test_invoke_with_logs_falls_back_to_one_read_when_the_stream_fails(
    kube: KubeCase, server: KubeTestServer
) -> None:
    """The follow request fails: the runner waits for the end, reads the log once, still feeds the sink."""
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.3, log=STREAM_TEXT))
    rule = server.fail("get", "pods/log", status=500)  # the first log call is the follow
    sink = Lines()
    result = await runner(kube).run(AgentConfig("Say hello"), logs=sink)
    assert rule.fired == 1
    assert server.count("get", "pods/log") == 2
    assert result.text
    assert [line for _, line in sink.lines] == STREAM_TEXT.splitlines()
    assert leftovers(server, kube.namespace) == []


async def test_streamed_lines_beyond_the_cap_reach_the_sink_but_are_not_kept(
    kube: KubeCase, server: KubeTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ironflow.k8s import pod_wait as runner_module

    monkeypatch.setattr(runner_module, "LOG_CAP_BYTES", 10)
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    sink = Lines()
    task = asyncio.ensure_future(runner(kube).run(AgentConfig("Say hello"), logs=sink))
    await eventually(lambda: len(server.objects(k8s.PODS, kube.namespace)) == 1)
    name = server.objects(k8s.PODS, kube.namespace)[0]["metadata"]["name"]
    await eventually(lambda: phase_of(server, kube.namespace, name) == "Running")
    server.append_log(kube.namespace, name, STREAM_TEXT)
    await eventually(lambda: len(sink.lines) == len(STREAM_TEXT.splitlines()))
    server.set_pod_phase(kube.namespace, name, "Succeeded")
    with pytest.raises(errors.SchemaValidation, match="no result line"):
        await task  # the result line was streamed, not kept
    assert leftovers(server, kube.namespace) == []


# --- cancellation ---------------------------------------------------------------------


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02, 0.05, 0.1])
async def test_cancelled_step_leaves_nothing(kube: KubeCase, delay: float) -> None:
    """Cancelled at any point (cleanup, create, wait): the pod and its prompt ConfigMap are deleted."""
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    task = asyncio.ensure_future(runner(kube).run(AgentConfig("x" * 120_000).scoped(RUN, "c")))
    await asyncio.sleep(delay)  # the point of the cancel, not a wait for something to happen
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await step_objects_left(kube)


async def test_step_cancelled_while_the_create_answer_is_in_flight_leaves_nothing(kube: KubeCase) -> None:
    """The pod exists on the server but its create has not returned yet: it is deleted anyway."""
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    sent = hold_create_answers(kube.api, k8s.PODS)
    task = asyncio.ensure_future(runner(kube).run(AgentConfig("x" * 120_000)))
    await sent.wait()
    assert len(await names(kube, k8s.PODS)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await step_objects_left(kube)


async def test_pod_run_cancelled_while_the_create_answer_is_in_flight_leaves_nothing(kube: KubeCase) -> None:
    from ironflow.k8s.commands.pod_runs import PodRun

    sent = hold_create_answers(kube.api)
    task = asyncio.ensure_future(PodRun("check", "busybox", "true").namespace(kube.namespace).run(kube.api))
    await sent.wait()
    assert await names(kube, k8s.PODS) == ["check"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await step_objects_left(kube)


async def test_cancelled_streaming_step_leaves_nothing(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None, log="partial\n"))
    sink = Lines()
    task = asyncio.ensure_future(runner(kube).run(AgentConfig("hi"), logs=sink))
    await eventually(lambda: sink.lines != [])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await step_objects_left(kube)


# --- fault injection ------------------------------------------------------------------

STEP_CALLS = [  # (verb, resource, nth call): every request a step with a large prompt makes
    ("list", "pods", 1),  # the cleanup's listing or the shared watch's first list, whichever is first
    ("list", "pods", 2),  # ... and the other one
    ("list", "configmaps", 1),
    ("watch", "pods", 1),
    ("create", "configmaps", 1),
    ("create", "pods", 1),
    ("get", "pods/log", 1),
    ("delete", "pods", 1),
    ("delete", "configmaps", 1),
]


@pytest.mark.parametrize(("verb", "resource", "nth"), STEP_CALLS)
@pytest.mark.parametrize("drop", [False, True], ids=["500", "dropped"])
async def test_a_failing_api_call_leaves_nothing_after_one_reaper_pass(
    kube: KubeCase, server: KubeTestServer, verb: str, resource: str, nth: int, drop: bool
) -> None:
    """Each API call of a step fails in turn: whatever the step reports, one reaper pass
    (at a time past the expiry) finds nothing of it, or removes what the API refused to."""
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.05, log=JSON_TEXT))
    rule = server.fail(verb, resource, nth=nth, status=500, drop=drop, times=1)
    config = AgentConfig("x" * 120_000).scoped(RUN, "faulty")
    outcome: object
    try:
        outcome = await runner(kube, provider(kube.namespace, timeout=2)).run(config)
    except errors.IronflowError as exc:  # a typed error, and a message that names the problem
        outcome = exc.message
    assert outcome
    assert rule.fired == 1
    server.clear_faults()
    await reaper.reap_namespace(kube.api, kube.namespace, now=FAR_FUTURE)
    await eventually(
        lambda: leftovers(server, kube.namespace) == [],
        what=lambda: f"the reaper pass to leave nothing; left: {leftovers(server, kube.namespace)}",
    )


async def test_unreachable_api_leaves_the_pod_for_the_reaper_and_says_so(
    kube: KubeCase, server: KubeTestServer
) -> None:
    """The wait fails and the delete cannot reach the API: the error names the pod and its expiry."""
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    server.fail("delete", "pods", status=503, times=10)
    server.deny("pods", "watch")
    with pytest.raises(errors.KubernetesError, match="left for the orphan reaper") as caught:
        await runner(kube).run(AgentConfig("hi"))
    assert "failed waiting for pod completion" in caught.value.message
    assert "expires at" in caught.value.message
    server.clear_faults()
    report = await reaper.reap_namespace(kube.api, kube.namespace, now=FAR_FUTURE)
    assert report.pods_deleted == 1


async def test_timed_out_pod_the_api_will_not_delete_is_noted_on_the_timeout(
    kube: KubeCase, server: KubeTestServer
) -> None:
    """The timeout stays an AgentTimeout; its note says the pod is left for the reaper."""
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    server.fail("delete", "pods", status=503, times=10)
    with pytest.raises(errors.AgentTimeout) as caught:
        await runner(kube, provider(kube.namespace, timeout=0.3)).run(AgentConfig("hi"))
    assert any("left for the orphan reaper" in note for note in getattr(caught.value, "__notes__", []))


# --- retries, release_run -------------------------------------------------------------


def old_attempt(ns: str, name: str, run: str, step: str, *, root: str | None = None) -> dict[str, Any]:
    lab = {labels.LABEL_MANAGED_BY: "ironflow", labels.LABEL_COMPONENT: "claude-runner", labels.LABEL_RUN_ID: run}
    lab[labels.LABEL_STEP] = step
    if root is not None:
        lab[labels.LABEL_ROOT_RUN_ID] = root
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": lab},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }


async def test_k8s_step_retry_still_deletes_the_previous_attempt(kube: KubeCase, server: KubeTestServer) -> None:
    """The old pod of the same run and step is gone before the new one is created."""
    await kube.api.create(k8s.PODS, kube.namespace, old_attempt(kube.namespace, "old", RUN, "greet"))
    await kube.api.create(k8s.PODS, kube.namespace, old_attempt(kube.namespace, "other-step", RUN, "other"))
    server.set_pod_phase(kube.namespace, "old", "Running")
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.05, log=JSON_TEXT))
    server.reset_requests()
    await runner(kube).run(AgentConfig("Say hello").scoped(RUN, "greet"))
    order = [(r.verb, r.resource, r.name) for r in server.requests if r.verb in ("delete", "create")]
    assert order.index(("delete", "pods", "old")) < order.index(("create", "pods", None))
    assert [p["metadata"]["name"] for p in server.objects(k8s.PODS, kube.namespace)] == ["other-step"]


async def test_previous_attempt_still_terminating_fails_the_step(kube: KubeCase, server: KubeTestServer) -> None:
    server.script_pods(PodScript(name_prefix="old", run_for=None, terminates=False))
    await kube.api.create(k8s.PODS, kube.namespace, old_attempt(kube.namespace, "old", RUN, "greet"))
    await eventually(lambda: phase_of(server, kube.namespace, "old") == "Running")
    p = provider(kube.namespace).previous_attempt_timeout(0.2)
    with pytest.raises(errors.CleanupError, match="the previous attempt of step greet of run") as caught:
        await runner(kube, p).run(AgentConfig("Say hello").scoped(RUN, "greet"))
    assert caught.value.retryable
    assert server.count("create", "pods") == 1  # only the old one: no second agent


async def test_k8s_release_run_deletes_the_pods_of_the_run_and_its_children(kube: KubeCase) -> None:
    ns = kube.namespace
    await kube.api.create(k8s.PODS, ns, old_attempt(ns, "mine", RUN, "a"))
    await kube.api.create(k8s.PODS, ns, old_attempt(ns, "child", "child-run", "b", root=RUN))
    await kube.api.create(k8s.PODS, ns, old_attempt(ns, "someone-else", "other-run", "a"))
    await kube.control.set_pod_phase(ns, "mine", "Running")  # one scheduled, one still Pending
    deleted = await runner(kube).release_run(RUN)
    assert deleted == 2
    assert await names(kube, k8s.PODS) == ["someone-else"]


async def test_k8s_release_run_deletes_jobs_before_their_pods(kube: KubeCase, server: KubeTestServer) -> None:
    from ironflow.k8s.commands.pod_runs import JobRun

    ns = kube.namespace
    job = JobRun("check", "busybox", "true").namespace(ns).label(labels.LABEL_RUN_ID, RUN)
    await kube.api.create(k8s.JOBS, ns, job.build_job())
    server.run_job(ns, "check", run_for=None)
    server.reset_requests()
    await runner(kube).release_run(RUN)
    deletes = [(r.verb, r.resource) for r in server.requests if r.verb in ("delete", "list")]
    assert deletes.index(("delete", "jobs")) < deletes.index(("list", "pods"))
    await eventually(lambda: server.objects(k8s.PODS, ns) == [])
    assert server.objects(k8s.JOBS, ns) == []


async def test_k8s_release_run_without_job_rights_still_releases_pods(kube: KubeCase, server: KubeTestServer) -> None:
    ns = kube.namespace
    server.deny("jobs", "list")
    await kube.api.create(k8s.PODS, ns, old_attempt(ns, "mine", RUN, "a"))
    assert await runner(kube).release_run(RUN) == 1
    assert server.objects(k8s.PODS, ns) == []


async def test_k8s_release_run_fails_while_a_pod_is_still_there(kube: KubeCase, server: KubeTestServer) -> None:
    """A pod that will not terminate: a replayable error naming the run."""
    ns = kube.namespace
    server.script_pods(PodScript(name_prefix="stuck", run_for=None, terminates=False))
    await kube.api.create(k8s.PODS, ns, old_attempt(ns, "stuck", RUN, "a"))
    await eventually(lambda: phase_of(server, ns, "stuck") == "Running")
    p = provider(ns).previous_attempt_timeout(0.2)
    with pytest.raises(errors.CleanupError, match=f"pods of run {RUN} still terminating after 0.2s") as caught:
        await runner(kube, p).release_run(RUN)
    assert caught.value.retryable


async def test_k8s_release_run_fails_when_pods_cannot_be_listed(kube: KubeCase, server: KubeTestServer) -> None:
    server.fail("list", "pods", status=500)
    with pytest.raises(errors.CleanupError, match=f"failed to list pods of run {RUN}"):
        await runner(kube).release_run(RUN)


async def test_k8s_release_run_fails_when_a_pod_cannot_be_deleted(kube: KubeCase, server: KubeTestServer) -> None:
    ns = kube.namespace
    await kube.api.create(k8s.PODS, ns, old_attempt(ns, "mine", RUN, "a"))
    server.fail("delete", "pods", status=500)
    with pytest.raises(errors.CleanupError, match=f"failed to delete pod 'mine' of run {RUN}"):
        await runner(kube).release_run(RUN)


# --- auth proxy tokens ----------------------------------------------------------------


def proxied(ns: str, *, timeout: float = 5) -> K8sEphemeralProvider:
    return (
        provider(ns, timeout=timeout)
        .auth_proxy("http://auth-proxy.ironflow:8080")
        .auth_proxy_admin_key("admin-key-value")
    )


async def test_no_token_no_pod(kube: KubeCase, server: KubeTestServer) -> None:
    issuer = MemoryIssuer(refuse=errors.AuthProxyError("auth proxy admin API answered 503: down", status=503))
    # "auth proxy" once (issue 17: it said "auth proxy: auth proxy admin API answered …").
    with pytest.raises(errors.AuthProxyError, match=r"^auth proxy admin API answered 503: down$"):
        await runner(kube, proxied(kube.namespace), issuer=issuer).run(AgentConfig("hi").scoped(RUN, "s"))
    assert server.count("create", "pods") == 0
    assert leftovers(server, kube.namespace) == []


async def test_token_is_bound_to_the_step_and_revoked_after_it(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.05, log=JSON_TEXT))
    issuer = MemoryIssuer()
    before = int(time.time())
    await runner(kube, proxied(kube.namespace), issuer=issuer).run(AgentConfig("hi").scoped(RUN, "s"))
    ((run, step, expires_at),) = issuer.issued
    assert (run, step) == (RUN, "s")
    assert before + 5 + 60 <= expires_at <= int(time.time()) + 5 + 60
    assert issuer.revoked == ["tok-000000000001"]


async def test_an_egress_policy_gets_its_own_egress_only_token_the_pods_proxy_password(kube: KubeCase) -> None:
    """The step's Claude token carries no policy; a second, egress-only token carries it and is the
    password of the pod's proxy variables (the proxy Service's egress port); both are revoked with
    the step. Without a policy there is neither the second token nor a proxy variable."""
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=1.0, log=JSON_TEXT))
    issuer = MemoryIssuer()
    policy = egress.policy_from_options(["pypi.org"], ["github"])
    ns = kube.namespace
    stepping = asyncio.create_task(
        runner(kube, proxied(ns).egress(policy), issuer=issuer).run(AgentConfig("hi").scoped(RUN, "s"))
    )
    seen: list[dict[str, Any]] = []

    async def pod_created() -> bool:
        seen[:] = (await kube.api.list(k8s.PODS, ns)).items
        return bool(seen)

    await eventually(pod_created, limit_s=10, interval_s=0.05, what="the step's pod")
    await stepping
    assert issuer.egress == [None, policy]
    assert issuer.credentials == [None, tokens.EgressCredential()]  # the Claude token, then the egress-only one
    assert [run_step[:2] for run_step in issuer.issued] == [(RUN, "s")] * 2
    assert issuer.revoked == ["tok-000000000001", "tok-000000000002"]
    env = {e["name"]: e.get("value") for e in seen[0]["spec"]["containers"][0]["env"]}
    url = "http://ironflow:ifap_secret_value_2@auth-proxy.ironflow:3128"
    assert [env[n] for n in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")] == [url] * 4
    assert env["ANTHROPIC_AUTH_TOKEN"] == "ifap_secret_value_1"  # the model's token is in no proxy URL
    assert env["NO_PROXY"].split(",")[0] == "auth-proxy.ironflow"  # the model relay is reached directly
    await runner(kube, proxied(ns), issuer=issuer).run(AgentConfig("hi").scoped(RUN, "t"))
    assert issuer.egress == [None, policy, None]
    await step_objects_left(kube)


async def test_token_is_revoked_when_the_step_fails(kube: KubeCase, server: KubeTestServer) -> None:
    server.fail("create", "pods", status=500)
    issuer = MemoryIssuer()
    with pytest.raises(errors.KubernetesError, match="failed to create K8s pod") as caught:
        await runner(kube, proxied(kube.namespace), issuer=issuer).run(AgentConfig("hi"))
    assert issuer.revoked == ["tok-000000000001"]
    assert find_leaks(["ifap_secret_value_1", "admin-key-value"], str(caught.value), repr(caught.value)) == []


async def test_proxy_token_and_admin_key_never_reach_logs_or_errors(
    kube: KubeCase, server: KubeTestServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Failures on every side of a proxied step: no log line or error holds the token or the key."""
    import logging

    caplog.set_level(logging.DEBUG)
    issuer = MemoryIssuer()
    server.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=None))
    server.fail("delete", "pods", status=503, times=10)
    with pytest.raises(errors.AgentTimeout) as timed_out:
        await runner(kube, proxied(kube.namespace, timeout=0.3), issuer=issuer).run(AgentConfig("hi"))
    server.clear_faults()
    server.fail("create", "pods", status=500)
    with pytest.raises(errors.KubernetesError) as refused:
        await runner(kube, proxied(kube.namespace), issuer=issuer).run(AgentConfig("hi"))
    secrets = ["ifap_secret_value_1", "ifap_secret_value_2", "admin-key-value"]
    haystacks = [caplog.text, str(timed_out.value), repr(timed_out.value), str(refused.value), repr(refused.value)]
    assert find_leaks(secrets, *haystacks, getattr(timed_out.value, "__notes__", [])) == []


async def test_release_run_revokes_the_run_tokens(kube: KubeCase) -> None:
    issuer = MemoryIssuer()
    await runner(kube, proxied(kube.namespace), issuer=issuer).release_run(RUN)
    assert issuer.runs_revoked == [RUN]


async def test_a_followed_steps_progress_is_reported_once_per_change(
    kube: KubeCase, caplog: pytest.LogCaptureFixture
) -> None:
    """Following the log waits twice (until the pod runs, then until it ends): the progress line
    still shows each change of where the pod is once."""
    caplog.set_level(logging.INFO, logger="ironflow.progress")
    await kube.control.script_pods(PodScript(name_prefix=RUNNER_PODS, run_for=0.3, log=STREAM_TEXT))
    await runner(kube).run(AgentConfig("Say hello"), logs=Lines())
    said = [r.getMessage() for r in caplog.records if r.name == "ironflow.progress"]
    assert any(": running on node " in line for line in said), said
    assert len(said) == len(set(said)), said
    await step_objects_left(kube)
