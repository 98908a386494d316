"""AgentSandboxProvider against the REAL agent-sandbox controller (v1.0.3, ``--extensions``) on a
real kube-apiserver, with kwok as the kubelet; and the k8s-agent-sandbox SDK (1.0.8) reading the
claims ironflow creates. Skipped when the control-plane binaries are not built.

kwok runs a pod's exec on this host (a ``ClusterExec`` rule scoped to the test's namespace, with
``HOME`` set to the test's directory), so the step's real shell command and a small ``claude``
stand-in run here, as with the test server's local exec. The backend-agnostic bodies of
``test_agent_sandbox_provider.py`` (the scripted stand-in controller's suite) run here unchanged
against :class:`RealEnv`, which offers the same interface as that suite's ``Env``; the tests that
need the stand-in's powers (scripted stalls, recorded events and execs) are written here against
what the real controller does: a pod that cannot be scheduled (a namespace node selector no node
matches) stands in for the stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import agent_sandbox_gc, pod_exec
from tests.fakes.kubelet import UNSCHEDULABLE
from tests.fakes.proxy_tokens import MemoryIssuer

from ironflow import errors, labels
from ironflow.agent_sandbox import catalog, claims, patterns, sandbox_environments
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.auth_proxy import AdminClient, Credential
from ironflow.auth_proxy.app import run_auth_proxy
from ironflow.auth_proxy.config import AuthProxyConfig
from ironflow.claude.cli import find_claude_cli
from ironflow.fake_model.server import FakeAnthropic, Script, TextTurn
from ironflow.k8s.environments import EnvironmentVolume
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret, find_leaks
from ironflow.steps import AgentConfig
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.kubeenv import MANUAL_NAMESPACE_PREFIX, KubeEnv
from ironflow.testing.polling import eventually


def _stand_in_suite() -> Any:
    """The stand-in controller's provider suite, loaded by path (tests are not a package)."""
    path = Path(__file__).with_name("test_agent_sandbox_provider.py")
    spec = importlib.util.spec_from_file_location("_agent_sandbox_provider_suite", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


suite = _stand_in_suite()
RUN: str = suite.RUN
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
ADMIN_KEY = "r" * 40
#: The garbage collector's cascade (claim -> Sandbox -> pod) and the controllers' reactions.
SETTLE_S = 30.0
_SANDBOX = claims.resources().sandboxes


async def wait_until(check: Callable[[], object]) -> None:
    """``eventually`` for a check that blocks (it calls the API through ``KubeEnv.request``):
    each poll runs in a thread, and the cluster gets ``SETTLE_S`` to settle."""
    await eventually(lambda: asyncio.to_thread(check), limit_s=SETTLE_S, interval_s=0.1)


@dataclass
class Exec:
    pod: str
    command: tuple[str, ...]
    stdin: bytes


@dataclass
class RealEnv:
    """The stand-in suite's ``Env`` interface over a namespace of the real cluster."""

    kube: KubeEnv
    api: k8s.KubeApi
    ns: str
    home: Path
    claude: Path
    execs: list[Exec] = field(default_factory=list)

    def provider(
        self, *, replicas: int = 1, timeout: float = 20, proxied: bool = False, ready: float = 20
    ) -> AgentSandboxProvider:
        pod = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(self.ns)
        pod = pod.claude_path(str(self.claude)).timeout(timeout).previous_attempt_timeout(SETTLE_S)
        if proxied:
            pod = pod.auth_proxy("http://auth-proxy.ironflow:8080")
        return AgentSandboxProvider(pod).warm_pool(replicas=replicas).ready_timeout(ready)

    async def apply_template(self, provider: AgentSandboxProvider) -> None:
        await provider.apply_template(self.api)

    def _list(self, resource: k8s.Resource) -> list[dict[str, Any]]:
        prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
        return list(self.kube.request("GET", f"{prefix}/namespaces/{self.ns}/{resource.plural}")["items"])

    def claims(self) -> list[dict[str, Any]]:
        return self._list(claims.resources().claims)

    def sandboxes(self) -> list[dict[str, Any]]:
        return self._list(_SANDBOX)

    def pods(self) -> list[dict[str, Any]]:
        return self._list(k8s.PODS)

    def step_sandboxes(self) -> list[str]:
        """Sandboxes bound to a claim (pool members waiting for one excluded)."""
        out = []
        for s in self.sandboxes():
            refs = s["metadata"].get("ownerReferences") or []
            if any(r.get("kind") == "SandboxClaim" for r in refs):
                out.append(s["metadata"]["name"])
        return out

    def nothing_left(self) -> bool:
        """No claim, no claimed Sandbox, and no pod but the warm pool's."""
        bound = set(self.step_sandboxes())
        members = {s["metadata"]["name"] for s in self.sandboxes()} - bound
        pods = [p["metadata"]["name"] for p in self.pods() if p["metadata"]["name"] not in members]
        return not self.claims() and not bound and not pods

    def seen_env(self) -> dict[str, str]:
        return dict(json.loads((self.home / "seen-env.json").read_text()))

    def record_execs(self) -> None:
        """Record every exec (pod, argv, stdin) the runner makes, as the test server does."""
        original = self.api.exec

        async def spy(namespace: str, pod: str, command: Any, **kwargs: Any) -> Any:
            self.execs.append(Exec(pod, tuple(command), bytes(kwargs.get("stdin") or b"")))
            return await original(namespace, pod, command, **kwargs)

        self.api.exec = spy  # type: ignore[method-assign]


@contextlib.contextmanager
def _namespace(kube: KubeEnv, annotations: Mapping[str, str] | None = None, *, prefix: str = "") -> Iterator[str]:
    name = f"{prefix}asr-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(name, labels=RESTRICTED, annotations=annotations)
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            kube.request("DELETE", f"/api/v1/namespaces/{name}")


def _allow_exec(kube: KubeEnv, ns: str, work_dir: Path, home: Path, env: Mapping[str, str] | None = None) -> None:
    """``KubeEnv.allow_exec`` with ``HOME`` (the sandbox's emptyDir home) set to the test's dir."""
    kube.allow_exec(ns, work_dir, {"HOME": str(home), **(env or {})})


@contextlib.asynccontextmanager
async def _real_env(
    kube: KubeEnv, tmp_path: Path, annotations: Mapping[str, str] | None = None, *, prefix: str = ""
) -> AsyncIterator[RealEnv]:
    home, claude = suite.write_agent_stand_in(tmp_path)  # the stand-in suite's agent
    with _namespace(kube, annotations, prefix=prefix) as ns:
        await asyncio.to_thread(_allow_exec, kube, ns, tmp_path, home)
        async with await k8s.KubeApi.connect(kube.cluster_config()) as api:
            yield RealEnv(kube, api, ns, home, claude)


@pytest.fixture(scope="module")
def gc_knows_sandboxes(kube_env: KubeEnv) -> None:
    """Wait until the garbage collector cascades through agent-sandbox objects.

    kube-controller-manager starts before the CRDs are installed, and its garbage collector
    picks new resources up on its next discovery pass (every 30 s): until then a deleted
    claim leaves its Sandbox and pod. A production cluster has its CRDs long before; here one
    SandboxTemplate owned by a ConfigMap shows when the cascade works."""
    with _namespace(kube_env) as ns:
        agent_sandbox_gc.wait_for_claim_cascade(kube_env, ns)


@pytest.fixture
async def env(kube_env: KubeEnv, gc_knows_sandboxes: None, tmp_path: Path) -> AsyncIterator[RealEnv]:
    async with _real_env(kube_env, tmp_path) as real:
        yield real


@pytest.fixture
async def stuck_env(kube_env: KubeEnv, gc_knows_sandboxes: None, tmp_path: Path) -> AsyncIterator[RealEnv]:
    """A namespace whose pods no node accepts: every Sandbox stays not Ready."""
    async with _real_env(kube_env, tmp_path, UNSCHEDULABLE) as real:
        yield real


@pytest.fixture
async def held_env(kube_env: KubeEnv, gc_knows_sandboxes: None, tmp_path: Path) -> AsyncIterator[RealEnv]:
    """A namespace whose pods stay Pending with no verdict: no node takes them, and the scheduler
    is kept from calling them Unschedulable (a kubelet-manual namespace): every Sandbox waits."""
    async with _real_env(kube_env, tmp_path, UNSCHEDULABLE, prefix=MANUAL_NAMESPACE_PREFIX) as real:
        yield real


async def _ready_members(env: RealEnv, count: int) -> list[dict[str, Any]]:
    def ready() -> bool:
        return sum(claims.has_condition(s, "Ready") for s in env.sandboxes()) >= count

    await wait_until(ready)
    return [s for s in env.sandboxes() if claims.has_condition(s, "Ready")]


# -- the stand-in suite's backend-agnostic bodies, on the real controller --

test_retry_deletes_the_previous_attempts_claim_first = suite.test_retry_deletes_the_previous_attempts_claim_first
test_step_that_changes_the_pod_is_refused_before_any_claim = (
    suite.test_step_that_changes_the_pod_is_refused_before_any_claim
)
test_invoke_with_logs_runs_verbose_and_hands_every_line_to_the_sink = (
    suite.test_invoke_with_logs_runs_verbose_and_hands_every_line_to_the_sink
)


# -- what the stand-in scripts, as the real controller does it --


async def test_cold_start_runs_the_step_in_a_sandbox_named_after_the_claim_and_leaves_nothing(env: RealEnv) -> None:
    """No pool members: the controller cold-starts a Sandbox (and pod) named after the claim,
    owned by it; the step runs there; the claim's deletion cascades to both."""
    p = env.provider(replicas=0)
    await env.apply_template(p)
    env.record_execs()
    seen: list[dict[str, Any]] = []
    original = env.api.exec

    async def snapshot(namespace: str, pod: str, command: Any, **kwargs: Any) -> Any:
        seen.extend(await asyncio.to_thread(env.sandboxes))
        return await original(namespace, pod, command, **kwargs)

    env.api.exec = snapshot  # type: ignore[method-assign]
    result = await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "cold"))
    assert result.text
    sandbox = seen[0]
    name = sandbox["metadata"]["name"]
    assert name.startswith(claims.CLAIM_NAME_PREFIX)
    assert sandbox["metadata"]["labels"]["agents.x-k8s.io/launch-type"] == "cold"
    assert [r["kind"] for r in sandbox["metadata"]["ownerReferences"]] == ["SandboxClaim"]
    assert {e.pod for e in env.execs} == {name}
    await wait_until(env.nothing_left)
    assert env.sandboxes() == []


async def test_warm_adoption_takes_the_ready_pool_member_and_the_pool_refills(env: RealEnv) -> None:
    p = env.provider(replicas=1)
    await env.apply_template(p)
    (member,) = await _ready_members(env, 1)
    name = member["metadata"]["name"]
    assert member["metadata"]["labels"][labels.LABEL_WARM_POOL_SANDBOX]
    env.record_execs()
    result = await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "warm"))
    assert result.text
    assert {e.pod for e in env.execs} == {name}  # the agent ran in the adopted member's pod
    # The member went with the claim; the pool made a new one.
    await wait_until(env.nothing_left)
    (refill,) = await _ready_members(env, 1)
    assert refill["metadata"]["name"] != name
    assert name not in {p["metadata"]["name"] for p in env.pods()}


async def test_claim_whose_pod_cannot_be_scheduled_fails_at_once_with_the_schedulers_reason(
    stuck_env: RealEnv,
) -> None:
    """The real controller makes the sandbox's pod, the real scheduler finds no node for it: the
    step ends with Unschedulable and kube-scheduler's message well before the ready timeout."""
    env = stuck_env
    env.record_execs()
    p = env.provider(replicas=0, ready=60)
    await env.apply_template(p)
    started = time.monotonic()
    with pytest.raises(errors.SandboxFailed) as caught:
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "stuck"))
    assert time.monotonic() - started < 20, "the step waited for the ready timeout"
    exc = caught.value
    assert exc.reason == "Unschedulable"
    assert exc.retryable
    assert f"{exc.subject} cannot start: Unschedulable: 0/1 nodes are available" in exc.message
    assert env.execs == []
    await wait_until(lambda: env.nothing_left() and not env.sandboxes())


async def test_claim_on_an_unknown_pool_fails_at_once_and_is_deleted(env: RealEnv) -> None:
    """No SandboxTemplate or pool of that name: the controller says so, and the step ends with its
    reason and message at once (not after the ready timeout), not retryable."""
    p = env.provider(replicas=0, ready=60).template("no-such-template")
    started = time.monotonic()
    why = r"^SandboxClaim \S+ cannot start: WarmPoolNotFound: SandboxWarmPool \"no-such-template\" not found"
    with pytest.raises(errors.SandboxRefused, match=why) as caught:
        await p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "unknown"))
    assert time.monotonic() - started < 10
    assert not caught.value.retryable
    await wait_until(lambda: env.nothing_left() and not env.sandboxes())


async def test_a_claim_made_before_its_pool_exists_waits_for_it_then_runs(env: RealEnv) -> None:
    """The controller retries a claim whose pool is not in its cache yet (what a claim made just after
    ``apply-template`` may see): a step whose claim says WarmPoolNotFound and whose pool is applied
    within the grace runs, not refused."""
    p = env.provider(replicas=0)
    step = asyncio.create_task(p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "early")))

    def not_found_yet() -> bool:
        return (
            any((claims.condition(c, "Ready") or {}).get("reason") == "WarmPoolNotFound" for c in env.claims())
            or step.done()
        )

    await wait_until(not_found_yet)
    assert not step.done(), step  # the reason was seen, and the step still waits
    await env.apply_template(p)
    result = await asyncio.wait_for(step, claims.DEPENDENCY_GRACE_S + 30)
    assert result.text
    await wait_until(env.nothing_left)


async def test_cancelled_while_waiting_for_ready_leaves_nothing(held_env: RealEnv) -> None:
    env = held_env
    p = env.provider(replicas=0)
    await env.apply_template(p)
    task = asyncio.ensure_future(p.runner(api=env.api, worker_env={}).run(AgentConfig("hi").scoped(RUN, "c")))
    await wait_until(lambda: bool(env.step_sandboxes()) and bool(env.pods()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: env.nothing_left() and not env.sandboxes())


async def test_cancelled_during_the_agent_exec_revokes_the_token_and_leaves_nothing(env: RealEnv) -> None:
    env.claude.write_text(f"#!/bin/sh\ntouch '{env.home}/started'\nsleep 5\n")
    p = env.provider(replicas=1, proxied=True)
    await env.apply_template(p)
    await _ready_members(env, 1)
    issuer = MemoryIssuer()
    task = asyncio.ensure_future(
        p.runner(api=env.api, issuer=issuer, worker_env={}).run(AgentConfig("hi").scoped(RUN, "cx"))
    )
    await wait_until((env.home / "started").exists)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert issuer.revoked == ["tok-000000000001"]
    await wait_until(env.nothing_left)


async def test_adopted_sandbox_gets_the_token_over_exec_reaches_the_model_through_the_real_proxy_and_it_is_revoked(
    env: RealEnv,
) -> None:
    """The agent (a stand-in calling the Messages API like the CLI) holds only the opaque token,
    delivered over exec stdin after the claim is Ready; the proxy swaps it for the upstream key;
    once the step ends the token is refused."""
    upstream_key = "sk-ant-api03-" + "u" * 24
    used = env.home / "used-token"
    answer = env.home / "answer"
    env.claude.write_text(
        "#!/bin/sh\n"
        f'printf %s "$ANTHROPIC_AUTH_TOKEN" > "{used}"\n'
        "python3 - <<'PY'\n"
        "import json, os, urllib.request\n"
        'body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}\n'
        'req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),\n'
        '    {"authorization": "Bearer " + os.environ["ANTHROPIC_AUTH_TOKEN"], "content-type": "application/json",\n'
        '     "anthropic-version": "2023-06-01"})\n'
        f'open("{answer}", "w").write(str(urllib.request.urlopen(req, timeout=10).status))\n'
        "PY\n"
        f"cat '{env.home.parent / 'out.json'}'\n"
    )
    async with FakeAnthropic(required_credential=upstream_key) as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream=fake.url)
        async with run_auth_proxy(config) as proxy:
            credential = Credential("api_key", Secret(upstream_key))
            async with AdminClient(proxy.url, ADMIN_KEY, credential=credential) as admin:
                pod = K8sEphemeralProvider.sandboxed("img").namespace(env.ns).claude_path(str(env.claude))
                p = AgentSandboxProvider(pod.timeout(30).auth_proxy(proxy.url)).warm_pool(replicas=1).ready_timeout(20)
                await env.apply_template(p)
                (member,) = await _ready_members(env, 1)
                issued_when_ready: list[bool] = []
                issue = admin.issue

                async def checked_issue(*args: Any, **kwargs: Any) -> Any:
                    bound = [c for c in await asyncio.to_thread(env.claims) if claims.has_condition(c, "Ready")]
                    issued_when_ready.append(len(bound) == 1)
                    return await issue(*args, **kwargs)

                admin.issue = checked_issue  # type: ignore[method-assign]
                env.record_execs()
                result = await p.runner(api=env.api, issuer=admin, worker_env={}).run(
                    AgentConfig("hi").scoped(RUN, "tok")
                )
                assert result.text
                assert issued_when_ready == [True]
                assert answer.read_text() == "200"
                token = used.read_text()
                assert token.startswith("ifap_")
                assert {e.pod for e in env.execs} == {member["metadata"]["name"]}
                # Delivered over exec stdin, then removed; never in an API object or an exec's argv.
                assert any(token.encode() in e.stdin for e in env.execs)
                assert not (env.home / ".ironflow" / "proxy-token").exists()
                objects = [env.claims(), env.sandboxes(), env.pods()]
                assert find_leaks([token], objects, [e.command for e in env.execs]) == []
                (request,) = fake.message_requests
                assert request.header("x-api-key") == upstream_key
                assert find_leaks([token], dict(request.headers), request.body) == []
                # Revoked at the end: the proxy refuses the token now.
                refused = await _messages_status(proxy.url, token)
                assert refused == 401
                assert len(fake.message_requests) == 1
    await wait_until(env.nothing_left)


async def _messages_status(base_url: str, token: str) -> int:
    import aiohttp

    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {token}", "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http, http.post(f"{base_url}/v1/messages", json=body, headers=headers) as r:
        return r.status


async def test_release_run_deletes_the_runs_claims_and_their_sandboxes(env: RealEnv) -> None:
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
    await wait_until(lambda: len(env.step_sandboxes()) == 3)
    assert await p.runner(api=env.api, issuer=issuer, worker_env={}).release_run(RUN) == 2
    assert [c["metadata"]["name"] for c in env.claims()] == ["other"]
    assert issuer.runs_revoked == [RUN]
    await wait_until(lambda: env.step_sandboxes() == ["other"] and len(env.pods()) == 1)


# -- the SDK sees our claims --


async def test_sdk_lists_the_claims_our_provider_creates_and_resolves_the_adopted_sandbox(env: RealEnv) -> None:
    """``list_all_sandboxes`` (the SDK's view: claims) names ours; ``resolve_sandbox_name``
    reads the warm member the controller bound, from the claim's status."""
    sdk = pytest.importorskip("k8s_agent_sandbox", reason="pip install k8s-agent-sandbox==1.0.8")
    kubernetes = pytest.importorskip("kubernetes")
    p = env.provider(replicas=1)
    await env.apply_template(p)
    (member,) = await _ready_members(env, 1)
    claim = sandbox_steps.claim_manifest(
        p.settings, AgentConfig("x").scoped(RUN, "sdk"), name="ours", now=int(time.time())
    )
    await env.api.create(p.resources.claims, env.ns, claim)
    api_client = kubernetes.config.new_client_from_config(config_file=str(env.kube.kubeconfig_path))
    try:
        client = sdk.SandboxClient(api_client=api_client)
        assert await asyncio.to_thread(client.list_all_sandboxes, env.ns) == ["ours"]
        mine = await asyncio.to_thread(client.list_all_sandboxes, env.ns, labels.SANDBOX_CLAIM_SELECTOR)
        assert mine == ["ours"]
        assert await asyncio.to_thread(client.list_all_sandboxes, env.ns, "app=other") == []
        name = await asyncio.to_thread(client.k8s_helper.resolve_sandbox_name, "ours", env.ns, 20)
        assert name == member["metadata"]["name"]
    finally:
        api_client.close()
    await claims.delete_quietly(env.api, p.resources.claims, env.ns, "ours")
    await wait_until(env.nothing_left)


async def test_concurrent_steps_share_one_claim_watch_and_one_pod_watch_and_never_share_a_sandbox(env: RealEnv) -> None:
    p = env.provider(replicas=2)
    await env.apply_template(p)
    await _ready_members(env, 2)
    env.record_execs()
    env.api.counters.reset()
    runner = p.runner(api=env.api, worker_env={})
    results = await asyncio.gather(*(runner.run(AgentConfig("hi").scoped(RUN, f"p{i}")) for i in range(3)))
    assert all(r.text for r in results)
    agent_pods = [e.pod for e in env.execs if e.command[0] == "sh"]
    assert len(agent_pods) == len(set(agent_pods)) == 3  # each step had a sandbox of its own
    assert env.api.counters.watches_opened == 2  # one of the claims, one of the pods, for all three
    await wait_until(env.nothing_left)


async def test_large_prompt_reaches_the_agent_through_a_file_written_over_exec(env: RealEnv) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    env.record_execs()
    prompt = "review this: " + "x" * 120_000
    await p.runner(api=env.api, worker_env={}).run(AgentConfig(prompt).scoped(RUN, "big"))
    seen = env.seen_env()
    assert seen["stdin"] == prompt
    assert "-p" not in seen["args"].split()
    assert all(len(" ".join(e.command)) < 10_000 for e in env.execs)
    assert any(e.stdin == prompt.encode() for e in env.execs)


async def test_apply_template_creates_then_leaves_unchanged_then_updates_on_the_real_apiserver(env: RealEnv) -> None:
    """The apiserver's defaults (and the controller's status) never look like a change."""
    p = env.provider(replicas=1)
    first = await p.apply_template(env.api)
    assert [(a.kind, a.action) for a in first] == [("SandboxTemplate", "created"), ("SandboxWarmPool", "created")]
    await _ready_members(env, 1)
    assert [a.action for a in await p.apply_template(env.api)] == ["unchanged", "unchanged"]
    assert [a.action for a in await p.warm_pool(replicas=2).apply_template(env.api)] == ["unchanged", "updated"]
    await _ready_members(env, 2)


async def test_a_failing_agent_leaks_the_token_nowhere_and_the_claim_goes(
    env: RealEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """kwok answers a non-zero exit with an InternalError quoting the argv (a kubelet sends the
    code), so this is a KubernetesError here, ProcessFailed on a kubelet; either way the token is
    in no log, error, API object or argv, it is revoked, and the claim goes."""
    caplog.set_level(logging.DEBUG)
    env.claude.write_text("#!/bin/sh\necho 'agent crashed' >&2\nexit 2\n")
    p = env.provider(replicas=1, proxied=True)
    await env.apply_template(p)
    await _ready_members(env, 1)
    env.record_execs()
    issuer = MemoryIssuer()
    with pytest.raises(errors.KubernetesError, match="exit status 2") as caught:
        await p.runner(api=env.api, issuer=issuer, worker_env={}).run(AgentConfig("hi").scoped(RUN, "leak"))
    objects = [env.claims(), env.sandboxes(), env.pods()]
    haystacks = [caplog.text, str(caught.value), repr(caught.value), objects, [e.command for e in env.execs]]
    assert issuer.tokens
    assert find_leaks(issuer.tokens, *haystacks) == []
    assert issuer.revoked == ["tok-000000000001"]
    await wait_until(env.nothing_left)


async def test_wait_for_ready_then_a_finished_timeout_like_kubectl_wait(env: RealEnv) -> None:
    p = env.provider(replicas=0)
    await env.apply_template(p)
    r = p.runner(api=env.api, worker_env={})
    claim = sandbox_steps.claim_manifest(p.settings, AgentConfig("x"), name="waited", now=int(time.time()))
    await env.api.create(p.resources.claims, env.ns, claim)
    ready = await r.wait_for("waited", "Ready", timeout_s=20)
    assert ready["status"]["sandbox"]["name"] == "waited"
    with pytest.raises(errors.OperationTimeout, match="condition Finished=True on sandboxclaims/waited"):
        await r.wait_for("waited", "Finished", timeout_s=0.5)


# -- what the real controller revealed, and the stand-in now does alike --


async def test_the_controller_deletes_a_claim_past_its_shutdown_time_before_the_reaper(env: RealEnv) -> None:
    """``lifecycle.shutdownTime`` passed with policy Delete: the controller deletes the claim
    itself (ironflow's reaper is the backstop for a controller that is down)."""
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
    await wait_until(lambda: [c["metadata"]["name"] for c in env.claims()] == ["fresh"])
    report = await p.runner(api=env.api, worker_env={}).reap_orphans()
    assert report.claims == ()


async def test_the_stand_in_expires_claims_words_its_conditions_and_adopts_like_the_real_controller(
    tmp_path: Path,
) -> None:
    """The stand-in (``expire_claims=True``) against the facts above: an expired claim goes, an
    unknown pool is ``WarmPoolNotFound`` with the real message, an unschedulable pod's claim says
    ``Pod exists with phase: Pending``, and an adopted member gets no ``pod-name`` annotation."""
    async with KubeTestServer() as server:
        controller = AgentSandboxController(server, namespace="std", expire_claims=True)
        controller.stall = lambda claim: claim["metadata"]["name"] == "stuck"
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("img").namespace("std")).warm_pool(replicas=1)
            await p.apply_template(api)
            res, now = p.resources, int(time.time())

            def claim(name: str, provider: AgentSandboxProvider = p, at: int = now) -> dict[str, Any]:
                return sandbox_steps.claim_manifest(provider.settings, AgentConfig("x"), name=name, now=at)

            await eventually(
                lambda: any(claims.has_condition(s, "Ready") for s in server.objects(res.sandboxes, "std"))
            )
            for body in (claim("old", at=now - 10_000), claim("warm"), claim("nopool", p.template("nope"))):
                await api.create(res.claims, "std", body)

            def settled() -> bool:
                names = {c["metadata"]["name"] for c in server.objects(res.claims, "std")}
                nopool = server.get_object(res.claims, "std", "nopool") or {}
                warm = server.get_object(res.claims, "std", "warm") or {}
                bound = ((warm.get("status") or {}).get("sandbox") or {}).get("name")
                return names == {"warm", "nopool"} and claims.condition(nopool, "Ready") is not None and bool(bound)

            await eventually(settled)
            cond = claims.condition(server.get_object(res.claims, "std", "nopool") or {}, "Ready") or {}
            assert (cond["reason"], cond["message"]) == ("WarmPoolNotFound", 'SandboxWarmPool "nope" not found')
            warm = server.get_object(res.claims, "std", "warm") or {}
            member = server.get_object(res.sandboxes, "std", warm["status"]["sandbox"]["name"]) or {}
            assert labels.ANNOTATION_SANDBOX_POD_NAME not in (member["metadata"].get("annotations") or {})
            # A pool that never had members: scaling the first pool to 0 would race its refill of
            # the adopted member (a pass that read replicas=1 can still create one), and "stuck"
            # would adopt that member and be Ready.
            cold = p.template("cold-only").warm_pool(replicas=0)
            await cold.apply_template(api)
            await api.create(res.claims, "std", claim("stuck", cold))

            def stuck_reason() -> tuple[str, str] | None:
                c = claims.condition(server.get_object(res.claims, "std", "stuck") or {}, "Ready") or {}
                return (str(c["reason"]), str(c.get("message"))) if c.get("reason") == "DependenciesNotReady" else None

            await eventually(lambda: stuck_reason() is not None)
            assert stuck_reason() == ("DependenciesNotReady", "Pod exists with phase: Pending")
            assert ("expired", "old", "") in controller.events


@pytest.mark.claude_cli
async def test_the_real_claude_cli_in_an_adopted_sandbox_reaches_the_model_only_through_the_proxy(
    env: RealEnv, tmp_path: Path
) -> None:
    """The pinned CLI, exec'd through the real apiserver into an adopted warm sandbox, gets the
    token from the exec'd file and its request reaches the fake model with the upstream key."""
    cli = _claude_cli()
    upstream_key = "sk-ant-api03-" + "c" * 24
    quiet = {"CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"}
    await asyncio.to_thread(_allow_exec, env.kube, env.ns, tmp_path, env.home, quiet)
    async with FakeAnthropic(Script.of(default=TextTurn("OK")), required_credential=upstream_key) as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream=fake.url)
        async with run_auth_proxy(config) as proxy:
            credential = Credential("api_key", Secret(upstream_key))
            async with AdminClient(proxy.url, ADMIN_KEY, credential=credential) as admin:
                pod = K8sEphemeralProvider.sandboxed("img").namespace(env.ns).claude_path(cli).timeout(60)
                p = AgentSandboxProvider(pod.auth_proxy(proxy.url)).warm_pool(replicas=1).ready_timeout(20)
                await env.apply_template(p)
                await _ready_members(env, 1)
                result = await p.runner(api=env.api, issuer=admin, worker_env={}).run(
                    AgentConfig("Say hello").scoped(RUN, "real")
                )
        assert result.text == "OK"
        assert fake.message_requests
        assert {r.header("x-api-key") for r in fake.message_requests} == {upstream_key}
    await wait_until(env.nothing_left)


def _claude_cli() -> str:
    try:
        return find_claude_cli()
    except errors.ConfigError as exc:
        pytest.skip(f"Claude Code CLI not installed: {exc}")


# -- a pattern whose pod runs the agent itself, behind the proxy --


async def test_ephemeral_pattern_gets_its_token_after_its_pod_runs_and_reaches_the_model_through_the_real_proxy(
    env: RealEnv, tmp_path: Path
) -> None:
    """``sandbox render ephemeral`` with an auth proxy: the real controller makes the pod from a
    Sandbox that holds the proxy's address and no token; ``deliver_token`` issues one only once
    kwok runs the pod and writes it over a real exec; the controller's pod, run in bubblewrap on
    the HOME that exec wrote into, waits for it and calls the Messages API through the proxy."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    upstream_key = "sk-ant-api03-" + "p" * 24
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    (fake_bin / "claude").write_text(
        "#!/usr/bin/python3\n"
        "import json, os, urllib.request\n"
        'body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}\n'
        'req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", json.dumps(body).encode(),\n'
        '    {"authorization": "Bearer " + os.environ["ANTHROPIC_AUTH_TOKEN"], "content-type": "application/json",\n'
        '     "anthropic-version": "2023-06-01"})\n'
        'print("status", urllib.request.urlopen(req, timeout=10).status)\n'
    )
    (fake_bin / "claude").chmod(0o755)
    async with FakeAnthropic(required_credential=upstream_key) as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN_KEY), upstream=fake.url)
        async with run_auth_proxy(config) as proxy:
            credential = Credential("api_key", Secret(upstream_key))
            async with AdminClient(proxy.url, ADMIN_KEY, credential=credential) as admin:
                pod_settings = (
                    K8sEphemeralProvider.sandboxed("img").namespace(env.ns).auth_proxy(proxy.url)
                    .claude_path("/opt/fake/claude")
                )  # fmt: skip
                opts = patterns.PatternOptions(name="eph", namespace=env.ns, provider=pod_settings)
                (sandbox,) = catalog.render_pattern("ephemeral", opts)
                await env.api.create(_SANDBOX, env.ns, sandbox)
                env.record_execs()
                issued_when_running: list[bool] = []
                issue = admin.issue

                async def checked_issue(*args: Any, **kwargs: Any) -> Any:
                    (pod,) = await asyncio.to_thread(env.pods)
                    issued_when_running.append(pod["status"].get("phase") == "Running")
                    return await issue(*args, **kwargs)

                admin.issue = checked_issue  # type: ignore[method-assign]
                p = AgentSandboxProvider(pod_settings)
                token_id = await p.runner(api=env.api, issuer=admin, worker_env={}).deliver_token("eph", run_id=RUN)
                assert issued_when_running == [True]
                token_file = env.home / ".ironflow" / "proxy-token"
                token = token_file.read_text()
                assert token.startswith("ifap_")
                assert token_file.stat().st_mode & 0o777 == 0o600
                (delivery,) = env.execs
                assert delivery.pod == "eph"
                assert delivery.stdin == token.encode()
                configmaps = env._list(k8s.CONFIGMAPS)
                assert find_leaks([token], env.sandboxes(), env.pods(), configmaps, delivery.command) == []
                (pod,) = env.pods()
                assert proxy.url in pod["spec"]["containers"][0]["command"][-1]
                run = await asyncio.to_thread(
                    pod_exec.run_pod, pod, tmp_path / "pod", extra_binds={str(fake_bin): "/opt/fake"},
                    empty_dirs={"ironflow-home": env.home}, timeout_s=60,
                )  # fmt: skip
                assert run.exit_code == 0, run.log
                assert "status 200" in run.log
                assert not token_file.exists()
                (request,) = fake.message_requests
                assert request.header("x-api-key") == upstream_key
                await admin.revoke(token_id)
                assert await _messages_status(proxy.url, token) == 401


async def test_deliver_token_issues_nothing_while_the_pod_does_not_run(held_env: RealEnv) -> None:
    env = held_env
    pod_settings = K8sEphemeralProvider.sandboxed("img").namespace(env.ns).auth_proxy("http://auth-proxy.ironflow:8080")
    (sandbox,) = catalog.render_pattern(
        "ephemeral", patterns.PatternOptions(name="held", namespace=env.ns, provider=pod_settings)
    )
    await env.api.create(_SANDBOX, env.ns, sandbox)
    issuer = MemoryIssuer()
    p = AgentSandboxProvider(pod_settings).ready_timeout(3)
    with pytest.raises(errors.OperationTimeout, match="the pod of Sandbox 'held' did not run within 3s"):
        await p.runner(api=env.api, issuer=issuer, worker_env={}).deliver_token("held")
    assert issuer.issued == []


# -- environment_volume: one PVC per environment id, the claim's own --


async def _mounted_while_running(env: RealEnv, pod: str, seen: dict[str, list[str]], since: str) -> None:
    """Record the PVCs pod ``pod`` mounts, from a watch of the pods since ``since``: a pod the step
    makes and deletes within one poll is still seen (polling the list missed it under load)."""
    async for event in env.api.watch(k8s.PODS, env.ns, resource_version=since):
        for found in event.items or (event.object,):
            if found.get("metadata", {}).get("name") == pod:
                volumes = found["spec"]["volumes"]
                seen[pod] = [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]
                return


def _pvcs(env: RealEnv) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in env._list(k8s.PERSISTENTVOLUMECLAIMS)}


async def test_each_environment_id_is_its_own_volume_and_a_resume_mounts_the_same_one_again(env: RealEnv) -> None:
    """Before: one ``<template>-env`` RWO claim for every sandbox of the template, and resuming any
    other id refused. Now a new step gets a new environment (a PVC the controller adopts for the
    claim's cold Sandbox, kept by the template when the claim goes); resuming its id mounts that
    same PVC again; another step gets another one; a second live claim of an id is one clear line
    and leaves the first alone."""
    pod = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(env.ns)
    pod = pod.claude_path(str(env.claude)).timeout(20).environment_volume(EnvironmentVolume("/workspace", size="1Gi"))
    p = AgentSandboxProvider(pod).warm_pool(replicas=0).ready_timeout(20)
    applied = await p.apply_template(env.api)
    assert [(a.kind, a.action) for a in applied] == [("SandboxTemplate", "created"), ("SandboxWarmPool", "created")]
    await asyncio.to_thread(env.kube.provide_volumes, 3)  # no provisioner here: volumes to bind to
    runner = p.runner(api=env.api, worker_env={})
    template_uid = env.kube.request("GET", claims.resources().templates.path(env.ns, "ironflow-agent"))["metadata"][
        "uid"
    ]

    async def step(config: AgentConfig, expect: str | None, seen: dict[str, list[str]]) -> str:
        since = (await env.api.list(k8s.PODS, env.ns)).resource_version
        watch = asyncio.create_task(_mounted_while_running(env, expect, seen, since)) if expect else None
        try:
            result = await runner.run(config)
            if watch is not None:
                await asyncio.wait_for(watch, 30)  # the pod's ADDED event has come, or comes now
        finally:
            if watch is not None:
                watch.cancel()
        assert result.text
        assert result.environment_id
        return result.environment_id

    seen: dict[str, list[str]] = {}
    first = await step(AgentConfig("hi").scoped(RUN, "one"), None, seen)
    assert first.startswith("ironflow-env-")
    volume = sandbox_environments.pvc_name(first)
    await wait_until(env.nothing_left)

    def kept_by_the_template_alone() -> bool:  # the garbage collector dropped the gone Sandbox's reference
        refs = _pvcs(env)[volume]["metadata"].get("ownerReferences") or []
        return [(o["kind"], o["uid"]) for o in refs] == [("SandboxTemplate", template_uid)]

    await wait_until(kept_by_the_template_alone)  # the claim, its Sandbox and pod are gone; the environment is not
    kept = _pvcs(env)[volume]

    again = await step(AgentConfig("hi").scoped(RUN, "two").resume_environment(first), first, seen)
    assert again == first
    assert seen[first] == [volume]  # the resumed claim's sandbox mounted the same PVC...
    await wait_until(env.nothing_left)
    assert _pvcs(env)[volume]["metadata"]["uid"] == kept["metadata"]["uid"]  # ...not a new one of that name

    other = await step(AgentConfig("hi").scoped(RUN, "three"), None, seen)
    assert other != first
    assert set(_pvcs(env)) == {volume, sandbox_environments.pvc_name(other)}

    # A live claim of the environment (another worker's step, say): the second is refused, the first kept.
    live = sandbox_steps.claim_manifest(
        p.settings, AgentConfig("hi"), name=first, now=int(time.time()), environment=True
    )
    await env.api.create(claims.resources().claims, env.ns, live)
    try:
        with pytest.raises(errors.KubeConflict) as refused:
            await runner.run(AgentConfig("hi").scoped(RUN, "four").resume_environment(first))
        assert str(refused.value) == sandbox_environments.in_use_message(first)
        assert [c["metadata"]["name"] for c in env.claims()] == [first]
    finally:
        await env.api.delete(claims.resources().claims, env.ns, first)
    with pytest.raises(errors.StepConfigError, match="environment 'ironflow-env-0-00000000' not found or expired"):
        await runner.run(AgentConfig("hi").scoped(RUN, "five").resume_environment("ironflow-env-0-00000000"))


@pytest.mark.claude_cli
async def test_a_later_claim_continues_the_conversation_with_the_real_claude_cli(env: RealEnv, tmp_path: Path) -> None:
    """The template mounts its sessions claim at ~/.claude/projects; a step, then a step of a new
    claim with ``continue_session``: the pinned CLI sends the first conversation again. (kwok's
    exec runs on this host with the test's HOME, which stands in for the claim's files.)"""
    cli = _claude_cli()
    key = "sk-ant-api03-" + "s" * 24
    async with FakeAnthropic(Script.of(default=TextTurn("OK")), required_credential=key) as fake:
        # kwok's exec gets its env from the ClusterExec rule, not the pod: the model's address goes there.
        model = {"ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": key}
        quiet = {"CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1", **model}
        await asyncio.to_thread(_allow_exec, env.kube, env.ns, tmp_path, env.home, quiet)
        pod = K8sEphemeralProvider.sandboxed("img").namespace(env.ns).claude_path(cli).timeout(60)
        p = AgentSandboxProvider(pod.conversations_volume("claude-sessions")).warm_pool(replicas=1).ready_timeout(20)
        applied = await p.apply_template(env.api)
        assert ("PersistentVolumeClaim", "claude-sessions", "created") in [(a.kind, a.name, a.action) for a in applied]
        await asyncio.to_thread(env.kube.provide_volumes, 1)  # no provisioner here: a volume to bind to
        (member,) = await _ready_members(env, 1)
        (member_pod,) = [x for x in env.pods() if x["metadata"]["name"] == member["metadata"]["name"]]
        mounts = {m["mountPath"] for m in member_pod["spec"]["containers"][0]["volumeMounts"]}
        assert "/home/claude/.claude/projects" in mounts
        runner = p.runner(api=env.api, worker_env={})
        first = await runner.run(AgentConfig("remember FIRST-TURN-MARKER").scoped(RUN, "one"))
        assert first.session_id
        env.record_execs()
        second = await runner.run(AgentConfig("and now?", continue_session=True).scoped(RUN, "two"))
        assert second.text == "OK"
        assert any("'--continue'" in " ".join(e.command) for e in env.execs)
        assert "FIRST-TURN-MARKER" in str(fake.message_requests[-1].body)
        await wait_until(env.nothing_left)
