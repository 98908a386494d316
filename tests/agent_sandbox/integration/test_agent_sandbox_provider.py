"""AgentSandboxProvider on the Kubernetes test server with the scripted agent-sandbox controller.

The controller stand-in turns claims into Sandboxes and pods (cold, or adopted from the warm
pool); execs run as local subprocesses standing in for the container, so the step's real
shell command runs, with a small ``claude`` stand-in that prints output the real CLI printed
(tests/fixtures/claude) and records the environment it got.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.fakes.kubecase import ServerControl, hold_create_answers
from tests.fakes.kubelet_problems import PROBLEMS, Problem
from tests.fakes.proxy_tokens import MemoryIssuer, RecordingIssuer, dropped, real_proxy, refused
from tests.fakes.spans import by_name, finished_spans
from tests.fakes.unclosed import unclosed_after_collect

from ironflow import errors, tracing
from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.models import ApiVersion
from ironflow.claude.cli import find_claude_cli
from ironflow.fake_model.server import FakeAnthropic
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.kube import reading
from ironflow.steps import AgentConfig, PermissionMode
from ironflow.testing import find_leaks
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer, local_exec
from ironflow.testing.polling import eventually

__all__ = ["finished_spans"]  # the fixture, imported to be found

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
JSON_TEXT = (FIXTURES / "json_text.out").read_text()
RUN = "01a0e906-1f85-7000-8000-00000000a5b0"
_ns = itertools.count(1)


@dataclass
class Env:
    server: KubeTestServer
    controller: AgentSandboxController
    api: k8s.KubeApi
    ns: str
    home: Path
    claude: Path

    def provider(
        self,
        *,
        replicas: int = 1,
        timeout: float = 10,
        proxied: bool = False,
        image_pull_grace: float = 60,
        ready_timeout: float = 30,
    ) -> AgentSandboxProvider:
        """The ready timeout is generous (a cold start on a loaded machine took over 2 s); a test
        of the timeout itself sets a short one."""
        pod = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(self.ns)
        pod = pod.claude_path(str(self.claude)).timeout(timeout).previous_attempt_timeout(2)
        pod = pod.image_pull_grace(image_pull_grace)
        if proxied:
            pod = pod.auth_proxy("http://auth-proxy.ironflow:8080")
        return AgentSandboxProvider(pod).warm_pool(replicas=replicas).ready_timeout(ready_timeout)

    async def apply_template(self, provider: AgentSandboxProvider) -> None:
        res = provider.resources
        for obj in sandbox_steps.template_objects(provider.settings):
            resource = res.templates if obj["kind"] == "SandboxTemplate" else res.pools
            await self.api.create(resource, self.ns, obj)

    def claims(self) -> list[dict[str, Any]]:
        return self.server.objects(claims.resources().claims, self.ns)

    def step_sandboxes(self) -> list[str]:
        """Sandboxes bound to a claim (pool members waiting for one excluded)."""
        out = []
        for s in self.server.objects(claims.resources().sandboxes, self.ns):
            refs = s["metadata"].get("ownerReferences") or []
            if any(r.get("kind") == "SandboxClaim" for r in refs):
                out.append(s["metadata"]["name"])
        return out

    def seen_env(self) -> dict[str, str]:
        return dict(json.loads((self.home / "seen-env.json").read_text()))


def write_agent_stand_in(tmp_path: Path) -> tuple[Path, Path]:
    """``(home, claude)``: a ``claude`` that records what it got (token variables included) in
    ``home/seen-env.json``, then prints real CLI output (shared with the real-controller suite)."""
    home = tmp_path / "home"
    home.mkdir()
    claude = tmp_path / "claude"
    fixture = tmp_path / "out.json"
    fixture.write_text(JSON_TEXT)
    claude.write_text(
        "#!/bin/sh\n"
        'python3 -c \'import json,os,sys; json.dump({k: os.environ.get(k, "") for k in '
        '("ANTHROPIC_AUTH_TOKEN","ANTHROPIC_BASE_URL")} | {"args": " ".join(sys.argv[1:]), '
        '"stdin": sys.stdin.read()}, '
        f'open("{home}/seen-env.json","w"))\' "$@"\n'
        f'cat "{fixture}"\n'
    )
    claude.chmod(0o755)
    return home, claude


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    home, claude = write_agent_stand_in(tmp_path)
    ns = f"as-{next(_ns)}"
    async with KubeTestServer() as server:
        server.serve_exec(local_exec({"HOME": str(home), "TMPDIR": str(tmp_path)}))
        controller = AgentSandboxController(server, namespace=ns, cold_start_s=0.05)
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            yield Env(server, controller, api, ns, home, claude)
            assert not controller.failures, controller.failures
            assert not server.internal_errors, server.internal_errors


async def test_cold_start_runs_the_step_in_the_claimed_sandbox_and_deletes_the_claim(env: Env) -> None:
    """No pool members: the claim cold-starts a Sandbox; the result is parsed; nothing stays."""
    p = env.provider(replicas=0)
    await env.apply_template(p)
    result = await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "cold"))
    assert result.text
    kinds = [e[0] for e in env.controller.events]
    assert kinds == ["cold"]
    await eventually(lambda: not env.claims() and not env.step_sandboxes())
    assert env.server.objects(k8s.PODS, env.ns) == []


async def test_a_claimed_step_is_a_sandbox_span_with_create_ready_and_exec_under_the_step(
    env: Env, finished_spans: InMemorySpanExporter
) -> None:
    p = env.provider(replicas=0, proxied=True)
    await env.apply_template(p)
    issuer = MemoryIssuer()
    with tracing.span("ironflow.step", step="traced"):
        traceparent = tracing.current_traceparent()
        config = AgentConfig("hi", trace_context=traceparent).scoped(RUN, "traced")
        await p.runner(api=env.api, issuer=issuer, worker_env={}).run(config)
    spans = finished_spans.get_finished_spans()
    (step,), (sandbox,) = by_name(spans, "ironflow.step"), by_name(spans, "ironflow.sandbox")
    stages = [by_name(spans, n) for n in ("ironflow.claim.create", "ironflow.claim.ready", "ironflow.sandbox.exec")]
    assert [len(found) for found in stages] == [1, 1, 1], [s.name for s in spans]
    create, ready, run = (found[0] for found in stages)
    assert sandbox.parent is not None
    assert sandbox.parent.span_id == step.context.span_id
    assert {s.parent.span_id for s in (create, ready, run) if s.parent} == {sandbox.context.span_id}
    attrs = sandbox.attributes or {}
    assert attrs["ironflow.backend"] == "agent-sandbox"
    assert (ready.attributes or {})["ironflow.sandbox"] == next(e[2] for e in env.controller.events if e[0] == "cold")
    assert (run.attributes or {})["ironflow.exit_code"] == 0
    assert issuer.trace_contexts == [traceparent]


async def test_warm_adoption_takes_a_ready_pool_member_and_the_pool_refills(env: Env) -> None:
    p = env.provider(replicas=1)
    await env.apply_template(p)
    sandboxes = claims.resources().sandboxes
    await eventually(lambda: len(env.server.objects(sandboxes, env.ns)) == 1)
    await eventually(lambda: claims.has_condition(env.server.objects(sandboxes, env.ns)[0], "Ready"))
    member = env.server.objects(sandboxes, env.ns)[0]["metadata"]["name"]
    result = await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "warm"))
    assert result.text
    events = env.controller.events
    assert ("warm", member) == (events[1][0], events[1][2])
    assert env.server.execs[-1].pod == member  # the agent ran in the adopted pod
    # The adopted member went with the claim; the pool made a new one.
    await eventually(lambda: not env.claims() and not env.step_sandboxes())
    await eventually(lambda: [e[0] for e in events].count("member") == 2)


async def test_a_pool_scaled_to_zero_deletes_its_ready_member_so_the_next_claim_cold_starts(env: Env) -> None:
    """As v1.0.3 does: scaled down, the pool deletes idle members; a claim made afterwards finds
    nothing to adopt (before, the stand-in kept the member and a later claim adopted it)."""
    p = env.provider(replicas=1)
    await env.apply_template(p)
    sandboxes = claims.resources().sandboxes
    await eventually(lambda: any(claims.has_condition(s, "Ready") for s in env.server.objects(sandboxes, env.ns)))
    member = env.server.objects(sandboxes, env.ns)[0]["metadata"]["name"]
    await env.api.patch(p.resources.pools, env.ns, p.settings.pool, {"spec": {"replicas": 0}})
    await eventually(lambda: not env.server.objects(sandboxes, env.ns) and not env.server.objects(k8s.PODS, env.ns))
    assert ("scaled-down", p.settings.pool, member) in env.controller.events
    await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "after"))
    assert [e[0] for e in env.controller.events if e[0] in ("warm", "cold")] == ["cold"]


async def test_token_reaches_the_sandbox_after_adoption_never_the_claim_and_is_revoked(env: Env) -> None:
    p = env.provider(replicas=1, proxied=True)
    await env.apply_template(p)
    issuer = MemoryIssuer()
    created: list[dict[str, Any]] = []
    original = env.api.create

    async def spy(resource: k8s.Resource, namespace: str | None, body: Any) -> Any:
        if resource.plural == "sandboxclaims":
            created.append(json.loads(json.dumps(body)))
            assert not issuer.issued, "the token must be issued after the claim exists and is Ready"
        return await original(resource, namespace, body)

    env.api.create = spy  # type: ignore[method-assign]
    await p.runner(api=env.api, issuer=issuer, worker_env={}).run(AgentConfig("hi").scoped(RUN, "tok"))
    assert issuer.issued
    assert issuer.issued[0][:2] == (RUN, "tok")
    assert issuer.revoked == ["tok-000000000001"]
    seen = env.seen_env()
    assert seen["ANTHROPIC_AUTH_TOKEN"] == issuer.tokens[0]
    assert seen["ANTHROPIC_BASE_URL"] == "http://auth-proxy.ironflow:8080"
    # Delivered over exec stdin, then removed; never in the claim or an exec's argv.
    assert not (env.home / ".ironflow" / "proxy-token").exists()
    assert find_leaks(issuer.tokens, created, [e.command for e in env.server.execs]) == []
    assert any(issuer.tokens[0].encode() in bytes(e.stdin) for e in env.server.execs)


async def test_a_refused_token_stays_non_retryable_and_the_claim_goes(env: Env) -> None:
    p = env.provider(replicas=0, proxied=True)
    await env.apply_template(p)
    with pytest.raises(errors.AuthProxyError, match=r"^auth proxy: admin key missing$") as caught:
        await p.runner(
            api=env.api,
            issuer=MemoryIssuer(refuse=errors.AuthProxyError("admin key missing", status=401, retryable=False)),
            worker_env={},
        ).run(AgentConfig("hi").scoped(RUN, "refused"))
    assert caught.value.retryable is False
    assert caught.value.status == 401
    await eventually(lambda: not env.claims() and not env.step_sandboxes())
    assert env.server.execs == []


async def test_claim_that_never_becomes_ready_times_out_and_is_deleted(env: Env) -> None:
    env.controller.stall = lambda claim: True
    p = env.provider(replicas=0, ready_timeout=2)
    await env.apply_template(p)
    with pytest.raises(errors.OperationTimeout, match=r"did not become Ready within 2s \(Ready=False"):
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "stuck"))
    await eventually(lambda: not env.claims() and not env.step_sandboxes())
    assert env.server.execs == []


async def test_claim_the_controller_refuses_fails_at_once_with_its_reason(env: Env) -> None:
    """No template or pool applied: the controller says WarmPoolNotFound and the step ends with it,
    not retryable, well before the ready timeout; the claim is deleted."""
    p = env.provider(replicas=0).ready_timeout(60)
    started = time.monotonic()
    with pytest.raises(errors.SandboxRefused, match=r"^SandboxClaim claude-claim-\S+ cannot start: WarmPoolNotFound: "):
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "refused"))
    assert time.monotonic() - started < 10
    await eventually(lambda: not env.claims() and not env.step_sandboxes())
    assert env.server.execs == []


@pytest.mark.parametrize("problem", [p for p in PROBLEMS if p.where != "scheduler"], ids=lambda p: p.reason)
async def test_a_sandbox_pod_that_cannot_start_ends_the_step_at_once_with_its_reason(
    env: Env, problem: Problem
) -> None:
    """The claim is bound, its sandbox's pod shows what the kubelet wrote: the step ends within
    5 s with the pod, the reason and the kubelet's message, not after the ready timeout."""
    env.controller.stall = lambda claim: True  # the pod never runs by itself
    p = env.provider(replicas=0, image_pull_grace=0).ready_timeout(60)
    await env.apply_template(p)
    task = asyncio.ensure_future(p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "pull")))
    try:
        pods = await eventually(lambda: env.server.objects(k8s.PODS, env.ns), what="the sandbox's pod")
        name = pods[0]["metadata"]["name"]
        await ServerControl(env.server).report_problem(env.ns, name, problem.reason, problem.message)
        shown = time.monotonic()
        with pytest.raises(errors.IronflowError) as caught:
            await asyncio.wait_for(task, timeout=30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert time.monotonic() - shown < 5
    exc = caught.value
    assert f"pod {name} " in exc.message
    assert f": {problem.reason}: " in exc.message
    assert isinstance(exc, errors.SandboxFailed if problem.retryable else errors.SandboxRefused)
    await eventually(lambda: not env.claims() and not env.step_sandboxes())
    assert env.server.execs == []


async def test_cancelled_step_deletes_its_claim(env: Env) -> None:
    env.controller.stall = lambda claim: True
    p = env.provider(replicas=0)
    await env.apply_template(p)
    task = asyncio.ensure_future(p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "c")))
    await eventually(lambda: bool(env.claims()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not env.claims() and not env.step_sandboxes())


async def test_a_claim_deleted_before_its_sandbox_is_created_leaves_no_sandbox_or_pod(env: Env) -> None:
    """The controller listed the claim, the step was cancelled and deleted it, then the cold start
    landed: the Sandbox (and its pod) point at an owner already gone and the collector removes them,
    as the real garbage collector does (issue 19: this interleaving left a Sandbox for good)."""
    env.controller.stall = lambda claim: True
    p = env.provider(replicas=0)
    await env.apply_template(p)
    reached, release = asyncio.Event(), asyncio.Event()
    controller_api = env.controller._api  # the stand-in's own client: hold its Sandbox create
    assert controller_api is not None
    original = controller_api.create

    async def held(resource: k8s.Resource, namespace: str | None, body: Any) -> Any:
        if resource.plural == "sandboxes":
            reached.set()
            await release.wait()
        return await original(resource, namespace, body)

    controller_api.create = held  # type: ignore[method-assign]
    task = asyncio.ensure_future(p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "c")))
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not env.claims(), what="the runner to delete its claim")
    release.set()
    await eventually(lambda: [e[0] for e in env.controller.events] == ["cold"], what="the late cold start")
    await eventually(
        lambda: not env.step_sandboxes() and not env.server.objects(k8s.PODS, env.ns),
        what="the late Sandbox and its pod to be collected",
    )


async def test_step_cancelled_while_the_claim_create_answer_is_in_flight_deletes_the_claim(env: Env) -> None:
    """The claim exists on the server but its create has not returned yet: it is deleted anyway."""
    env.controller.stall = lambda claim: True
    p = env.provider(replicas=0)
    await env.apply_template(p)
    sent = hold_create_answers(env.api, claims.resources().claims)
    task = asyncio.ensure_future(p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "c")))
    await sent.wait()
    assert len(env.claims()) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not env.claims() and not env.step_sandboxes(), what="the claim and its sandbox to go")


async def test_release_run_deletes_the_runs_claims_and_waits(env: Env) -> None:
    env.controller.stall = lambda claim: True
    p = env.provider(replicas=0)
    await env.apply_template(p)
    issuer = MemoryIssuer()
    for step in ("a", "b"):
        claim = sandbox_steps.claim_manifest(
            p.settings, AgentConfig("x").scoped(RUN, step), name=f"left-{step}", now=int(time.time())
        )
        await env.api.create(p.resources.claims, env.ns, claim)
    other = sandbox_steps.claim_manifest(
        p.settings, AgentConfig("x").scoped("other-run", "a"), name="other", now=int(time.time())
    )
    await env.api.create(p.resources.claims, env.ns, other)
    assert await p.runner(api=env.api, issuer=issuer, worker_env={}).release_run(RUN) == 2
    assert [c["metadata"]["name"] for c in env.claims()] == ["other"]
    assert issuer.runs_revoked == [RUN]


async def test_retry_deletes_the_previous_attempts_claim_first(env: Env) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    config = AgentConfig("hi").scoped(RUN, "again")
    await env.api.create(
        p.resources.claims,
        env.ns,
        sandbox_steps.claim_manifest(p.settings, config, name="old-attempt", now=int(time.time())),
    )
    await p.runner(api=env.api, worker_env={}).run(config)
    assert all(c["metadata"]["name"] != "old-attempt" for c in env.claims())


async def test_reaper_deletes_only_expired_claims(env: Env) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    now = int(time.time())
    await env.api.create(
        p.resources.claims,
        env.ns,
        sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="old", now=now - 10_000),
    )
    await env.api.create(
        p.resources.claims, env.ns, sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="fresh", now=now)
    )
    report = await p.runner(api=env.api, worker_env={}).reap_orphans()
    assert report.claims == ("old",)
    assert [c["metadata"]["name"] for c in env.claims()] == ["fresh"]


async def test_wait_for_finished_like_kubectl_wait(env: Env) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    r = p.runner(api=env.api, worker_env={})
    claim = sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="waited", now=int(time.time()))
    await env.api.create(p.resources.claims, env.ns, claim)
    await r.wait_for("waited", "Ready", timeout_s=3)
    with pytest.raises(errors.OperationTimeout, match="condition Finished=True on sandboxclaims/waited"):
        await r.wait_for("waited", "Finished", timeout_s=0.2)
    env.server.set_pod_phase(env.ns, "waited", "Succeeded")
    done = await r.wait_for("waited", "Finished", timeout_s=3)
    assert claims.condition(done, "Finished")["reason"] == "PodSucceeded"  # type: ignore[index]


async def test_step_that_changes_the_pod_is_refused_before_any_claim(env: Env) -> None:
    p = env.provider(replicas=0)
    config = AgentConfig("hi").scoped(RUN, "x").pod_label("team", "a")
    with pytest.raises(errors.StepConfigError, match="changes the sandbox pod"):
        await p.runner(api=env.api, worker_env={}).run(config)
    assert env.claims() == []


async def test_bypass_step_runs_when_the_worker_allows_it(env: Env) -> None:
    """IRONFLOW_ALLOW_BYPASS=1 in the worker's env: accepted, as the k8s provider accepts it."""
    p = env.provider(replicas=0)
    await env.apply_template(p)
    config = AgentConfig("hi", permission_mode=PermissionMode.BYPASS_PERMISSIONS).scoped(RUN, "bypass")
    result = await p.runner(api=env.api, worker_env={"IRONFLOW_ALLOW_BYPASS": "1"}).run(config)
    assert result.text
    assert "--dangerously-skip-permissions" in env.seen_env()["args"].split()
    await eventually(lambda: not env.claims() and not env.step_sandboxes())


async def test_bypass_step_is_refused_as_on_k8s_when_the_worker_does_not_allow_it(env: Env) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    config = AgentConfig("hi", permission_mode=PermissionMode.BYPASS_PERMISSIONS).scoped(RUN, "bypass")
    with pytest.raises(errors.StepConfigError) as on_k8s:
        await StepRunner.of(p.settings.pod.settings, api=env.api, worker_env={}).run(config)
    with pytest.raises(errors.StepConfigError) as on_sandbox:
        await p.runner(api=env.api, worker_env={}).run(config)
    assert str(on_sandbox.value) == str(on_k8s.value)
    assert "IRONFLOW_ALLOW_BYPASS=1" in str(on_sandbox.value)
    assert env.claims() == []
    assert env.server.objects(k8s.PODS, env.ns) == []


async def test_large_prompt_reaches_the_agent_through_a_file_written_over_exec(env: Env) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    prompt = "review this: " + "x" * 120_000
    await p.runner(api=env.api, worker_env={}).run(AgentConfig(prompt).scoped(RUN, "big"))
    seen = env.seen_env()
    assert seen["stdin"] == prompt
    assert "-p" not in seen["args"].split()
    assert all(len(" ".join(e.command)) < 10_000 for e in env.server.execs)


async def test_failing_agent_is_a_process_failure_and_the_claim_goes(env: Env) -> None:
    env.claude.write_text("#!/bin/sh\necho 'boom' >&2\nexit 3\n")
    p = env.provider(replicas=0)
    await env.apply_template(p)
    with pytest.raises(errors.ProcessFailed) as caught:
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "fail"))
    assert caught.value.exit_code == 3
    await eventually(lambda: not env.claims())


async def test_agent_over_its_timeout_is_an_agent_timeout_and_the_claim_goes(env: Env) -> None:
    env.claude.write_text("#!/bin/sh\nsleep 30\n")
    p = env.provider(replicas=0, timeout=0.5)
    await env.apply_template(p)
    with pytest.raises(errors.AgentTimeout):
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "slow"))
    await eventually(lambda: not env.claims() and not env.step_sandboxes())


async def test_a_step_timeout_shorter_than_the_providers_ends_the_claims_step_at_its_own_bound(env: Env) -> None:
    env.claude.write_text("#!/bin/sh\nsleep 300\n")
    p = env.provider(replicas=0, timeout=120)
    await env.apply_template(p)
    started = time.monotonic()
    with pytest.raises(errors.AgentTimeout, match=r"\(the step's timeout\)") as caught:
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").with_timeout(1).scoped(RUN, "bounded"))
    assert caught.value.bound == "step"
    assert time.monotonic() - started < 60  # the step's 1 s, far short of the provider's 120 s
    await eventually(lambda: not env.claims() and not env.step_sandboxes())


async def test_a_step_cancelled_while_its_agent_runs_has_its_token_refused_at_once(env: Env) -> None:
    env.claude.write_text("#!/bin/sh\nsleep 300\n")
    p = env.provider(replicas=0, timeout=120, proxied=True)
    await env.apply_template(p)
    async with real_proxy() as (url, admin):
        issuer = RecordingIssuer(admin)
        step = p.runner(api=env.api, issuer=issuer, worker_env={}).run(AgentConfig("hi").scoped(RUN, "dropped"))
        task = asyncio.create_task(step)
        await eventually(lambda: bool(issuer.tokens), interval_s=0.05, what="the step's token")
        (token,) = issuer.tokens
        assert not await refused(url, token)  # live while the step runs
        await dropped(task)
        assert await refused(url, token)  # at once: no wait, no expiry
    await eventually(lambda: not env.claims() and not env.step_sandboxes())


async def test_apply_template_creates_then_updates_then_leaves_unchanged(env: Env) -> None:
    p = env.provider(replicas=1)
    first = await p.apply_template(env.api)
    assert [(a.kind, a.action) for a in first] == [("SandboxTemplate", "created"), ("SandboxWarmPool", "created")]
    again = await p.apply_template(env.api)
    assert [a.action for a in again] == ["unchanged", "unchanged"]
    bigger = p.warm_pool(replicas=3)
    assert [a.action for a in await bigger.apply_template(env.api)] == ["unchanged", "updated"]
    pool = env.server.get_object(p.resources.pools, env.ns, p.settings.pool)
    assert pool is not None
    assert pool["spec"]["replicas"] == 3
    sandboxes = p.resources.sandboxes
    await eventually(lambda: len(env.server.objects(sandboxes, env.ns)) == 3)


async def test_v1alpha1_claims_run_steps_too(tmp_path: Path) -> None:
    """The seed's API: claim -> sandboxTemplateRef + warmpool policy."""
    async with KubeTestServer() as server:
        server.serve_exec(local_exec({"HOME": str(tmp_path)}))
        controller = AgentSandboxController(server, namespace="alpha", version=ApiVersion.V1ALPHA1)
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            claude = tmp_path / "claude"
            claude.write_text(f"#!/bin/sh\ncat '{FIXTURES / 'json_text.out'}'\n")
            claude.chmod(0o755)
            pod = K8sEphemeralProvider.sandboxed("img").namespace("alpha").claude_path(str(claude))
            p = AgentSandboxProvider(pod).api_version("v1alpha1").warm_pool(replicas=1).ready_timeout(3)
            await p.apply_template(api)
            await eventually(lambda: bool(server.objects(p.resources.sandboxes, "alpha")))
            result = await p.runner(api=api, worker_env={}).run(AgentConfig("hi"))
            assert result.text
            assert [e[0] for e in controller.events][:2] == ["member", "warm"]
            assert not controller.failures


@pytest.mark.claude_cli
async def test_real_claude_cli_reaches_the_api_only_with_the_token_delivered_over_exec(env: Env) -> None:
    """The fake Messages API accepts only the issued token: the CLI got it from the exec'd file."""
    cli = _claude_cli()
    issuer = MemoryIssuer()
    async with FakeAnthropic(required_credential="ifap_secret_value_1") as fake:
        env.server.serve_exec(
            local_exec({"HOME": str(env.home), "CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"})
        )
        pod = K8sEphemeralProvider.sandboxed("img").namespace(env.ns).claude_path(cli).timeout(60).auth_proxy(fake.url)
        p = AgentSandboxProvider(pod).warm_pool(replicas=1).ready_timeout(3)
        await env.apply_template(p)
        result = await p.runner(api=env.api, issuer=issuer, worker_env={}).run(
            AgentConfig("Say hello").scoped(RUN, "real")
        )
        assert result.text == "OK"
        assert [r.header("authorization") for r in fake.message_requests] == ["Bearer ifap_secret_value_1"]
        assert issuer.revoked == ["tok-000000000001"]
    await eventually(lambda: not env.claims())


def _claude_cli() -> str:
    try:
        return find_claude_cli()
    except errors.ConfigError as exc:
        pytest.skip(f"Claude Code CLI not installed: {exc}")


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))


async def test_invoke_with_logs_runs_verbose_and_hands_every_line_to_the_sink(env: Env) -> None:
    stream = (FIXTURES / "stream_text.out").read_text()
    (env.home / "out.json").write_text(stream)
    env.claude.write_text(f"#!/bin/sh\necho \"$@\" > '{env.home}/args'\ncat '{env.home}/out.json'\n")
    p = env.provider(replicas=0)
    await env.apply_template(p)
    sink = Lines()
    result = await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "v"), logs=sink)
    assert result.text
    assert "--output-format stream-json --verbose" in (env.home / "args").read_text()
    assert [line for _, line in sink.lines] == stream.splitlines()


async def test_a_line_past_a_pod_logs_bound_reaches_the_sink_cut_there(env: Env) -> None:
    """The agent writes what it likes: a line of 20 MiB reaches the sink as its first 16 MiB (as
    a followed pod log's does), never held whole, and the lines after it come as they are."""
    stream = (FIXTURES / "stream_text.out").read_text()
    (env.home / "out.json").write_text(stream)
    script = f"head -c {20 << 20} /dev/zero | tr '\\0' a; echo; echo after; cat '{env.home}/out.json'"
    env.claude.write_text(f"#!/bin/sh\n{script}\n")
    p = env.provider(replicas=0)
    await env.apply_template(p)
    sink = Lines()
    await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "long"), logs=sink)
    first, *rest = [line for _, line in sink.lines]
    assert first == "a" * reading.MAX_LOG_LINE_BYTES
    assert rest == ["after", *stream.splitlines()]


async def test_periodic_reaper_deletes_expired_claims_and_stops(env: Env) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    stale = sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="stale", now=int(time.time()) - 10_000)
    await env.api.create(p.resources.claims, env.ns, stale)
    handle = p.runner(api=env.api, worker_env={}).spawn_orphan_reaper(60)
    try:
        await eventually(lambda: not env.claims())
    finally:
        await handle.stop()
    assert not handle.running


async def test_the_token_never_reaches_logs_errors_or_api_objects(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    env.claude.write_text("#!/bin/sh\necho 'agent crashed' >&2\nexit 2\n")
    p = env.provider(replicas=1, proxied=True)
    await env.apply_template(p)
    issuer = MemoryIssuer()
    with pytest.raises(errors.ProcessFailed) as caught:
        await p.runner(api=env.api, issuer=issuer, worker_env={}).run(AgentConfig("hi").scoped(RUN, "leak"))
    objects = [env.server.objects(r, env.ns) for r in (*vars(p.resources).values(), k8s.PODS, k8s.CONFIGMAPS)]
    haystacks = [caplog.text, str(caught.value), repr(caught.value), objects, [e.command for e in env.server.execs]]
    assert issuer.tokens
    assert find_leaks(issuer.tokens, *haystacks) == []
    assert issuer.revoked == ["tok-000000000001"]


async def test_cancelled_during_the_agent_exec_revokes_the_token_and_deletes_the_claim(env: Env) -> None:
    env.claude.write_text("#!/bin/sh\nsleep 30\n")
    p = env.provider(replicas=1, proxied=True)
    await env.apply_template(p)
    issuer = MemoryIssuer()
    runner = p.runner(api=env.api, issuer=issuer, worker_env={})
    task = asyncio.ensure_future(runner.run(AgentConfig("hi").scoped(RUN, "cx")))
    await eventually(lambda: env.server.running_execs == 1 and len(env.server.execs) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert issuer.revoked == ["tok-000000000001"]
    await eventually(lambda: not env.claims() and not env.step_sandboxes() and not env.server.running_execs)


async def test_a_cluster_without_agent_sandbox_says_so() -> None:
    async with KubeTestServer() as server, await k8s.KubeApi.connect(server.cluster_config()) as api:
        p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("img"))
        with pytest.raises(
            errors.KubeNotFound, match=r"does not serve sandboxclaims\.extensions\.agents\.x-k8s\.io/v1beta1"
        ):
            await p.runner(api=api, worker_env={}).run(AgentConfig("hi"))


async def test_concurrent_steps_share_one_claim_watch_and_one_pod_watch_and_never_share_a_sandbox(env: Env) -> None:
    p = env.provider(replicas=2)
    await env.apply_template(p)
    sandboxes = p.resources.sandboxes
    await eventually(lambda: sum(claims.has_condition(s, "Ready") for s in env.server.objects(sandboxes, env.ns)) == 2)
    env.api.counters.reset()
    runner = p.runner(api=env.api, worker_env={})
    results = await asyncio.gather(*(runner.run(AgentConfig("hi").scoped(RUN, f"p{i}")) for i in range(3)))
    assert all(r.text for r in results)
    kinds = [e[0] for e in env.controller.events]
    # Two members were Ready; the third step takes a refilled member or a cold start.
    assert kinds.count("warm") >= 2
    assert kinds.count("warm") + kinds.count("cold") == 3
    bound = [e[2] for e in env.controller.events if e[0] in ("warm", "cold")]
    assert len(set(bound)) == 3  # each step had a sandbox of its own
    # One watch of the claims and one of the pods (each bound sandbox's pod is classified), for all three.
    assert env.api.counters.watches_opened == 2
    assert env.server.count("watch", "pods") == 1
    await eventually(lambda: not env.claims() and not env.step_sandboxes())


async def test_invoke_with_logs_streams_lines_while_the_agent_runs(env: Env) -> None:
    stream = (FIXTURES / "stream_text.out").read_text().splitlines()
    (env.home / "first").write_text(stream[0] + "\n")
    (env.home / "rest").write_text("\n".join(stream[1:]) + "\n")
    env.claude.write_text(f"#!/bin/sh\ncat '{env.home}/first'\nsleep 0.5\ncat '{env.home}/rest'\n")
    p = env.provider(replicas=0)
    await env.apply_template(p)

    class Live(Lines):
        def __init__(self) -> None:
            super().__init__()
            self.running_at_first: bool | None = None

        def log(self, stream: str, line: str) -> None:
            if self.running_at_first is None:
                self.running_at_first = env.server.running_execs == 1
            super().log(stream, line)

    sink = Live()
    await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "live"), logs=sink)
    assert sink.running_at_first is True
    assert [line for _, line in sink.lines] == stream


def test_the_provider_closes_the_api_client_it_opened() -> None:
    """``aclose`` closes the client the provider opened for its calls; left open, the collector
    finds it later (under ``filterwarnings = error``, in whichever test is running then)."""

    async def release(*, close: bool) -> int:
        async with KubeTestServer() as server, AgentSandboxController(server, namespace="leak"):
            pod = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace("leak")
            p = AgentSandboxProvider(pod.cluster(server.cluster_config()))
            released = await p.release_run(RUN)
            if close:
                await p.aclose()
            return released

    assert asyncio.run(release(close=True)) == 0
    assert unclosed_after_collect() == []
    assert asyncio.run(release(close=False)) == 0
    # Session and connector die in one cycle, in no set order; whichever finalizer runs first
    # reports the leak and closes the connector, which silences the other.
    leaked = ("Unclosed client session", "Unclosed connector")
    assert any(found.startswith(leaked) for found in unclosed_after_collect())
