"""agent-sandbox sessions: a SandboxClaim on a warm pool adopts the Ready member, and the session
runs in that member's pod through exec; on the kube test server with the scripted stand-in
controller, and on the real kube-apiserver with the real agent-sandbox controller (kwok runs the
pods; skipped with the reason when the binaries are not built). Another holder reattaches by id;
close deletes the claim and its Sandbox goes with it; one claim-reaper pass past the TTL deletes
a lost holder's claim. The contract every backend keeps is ``test_session_contract.py``."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.agent_sandbox_gc import wait_for_claim_cascade
from tests.sessions.integration.cases import agent_sandbox_settings

from ironflow import errors, labels
from ironflow.agent_sandbox import claims
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.claim_sessions import AgentSandboxSessions
from ironflow.kube import api as kube
from ironflow.sessions import OpenOptions
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer, local_exec
from ironflow.testing.polling import eventually

#: The real garbage collector's cascade (claim -> Sandbox -> pod): it learns the CRDs on its
#: next discovery pass (every 30 s) after they are installed.
CASCADE_S = 90.0


@dataclass
class Pool:
    api: kube.KubeApi
    namespace: str
    work: Path
    execs: list[str] = field(default_factory=list)

    def sessions(self) -> AgentSandboxSessions:
        return AgentSandboxSessions(agent_sandbox_settings(self.namespace), api=self.api)

    async def _list(self, resource: kube.Resource) -> list[dict[str, Any]]:
        return (await self.api.list(resource, self.namespace)).items

    async def ready_members(self) -> list[str]:
        sandboxes = await self._list(claims.resources().sandboxes)
        return [
            s["metadata"]["name"]
            for s in sandboxes
            if claims.has_condition(s, "Ready") and labels.LABEL_WARM_POOL_SANDBOX in s["metadata"].get("labels", {})
        ]

    async def claimed(self) -> list[str]:
        """Session claims, and Sandboxes still owned by a claim."""
        names = [c["metadata"]["name"] for c in await self._list(claims.resources().claims)]
        for s in await self._list(claims.resources().sandboxes):
            if any(r.get("kind") == "SandboxClaim" for r in s["metadata"].get("ownerReferences") or []):
                names.append(f"sandbox {s['metadata']['name']}")
        return names

    async def nothing_claimed(self) -> bool:
        return not await self.claimed()

    def record_execs(self) -> None:
        original = self.api.exec

        async def spy(namespace: str, pod: str, command: Any, **kwargs: Any) -> Any:
            self.execs.append(pod)
            return await original(namespace, pod, command, **kwargs)

        self.api.exec = spy  # type: ignore[method-assign]


@pytest.fixture(params=["stand-in", "real-controller"])
async def pool(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Pool]:
    work = tmp_path / "work"
    work.mkdir()
    if request.param == "real-controller":
        env = request.getfixturevalue("kube_env")  # skipped, with the reason, when not built
        with env.namespace(f"as-sessions-{uuid.uuid4().hex[:8]}") as namespace:
            await asyncio.to_thread(wait_for_claim_cascade, env, namespace)
            await asyncio.to_thread(env.allow_exec, namespace, work)
            async with await kube.KubeApi.connect(env.cluster_config()) as client:
                await AgentSandboxProvider(agent_sandbox_settings(namespace)).apply_template(client)
                yield Pool(client, namespace, work)
        return
    async with KubeTestServer() as server:
        server.create_namespace("pool")
        server.serve_exec(local_exec(cwd=str(work)))
        controller = AgentSandboxController(server, namespace="pool", cold_start_s=0.05)
        async with controller, await kube.KubeApi.connect(server.cluster_config()) as client:
            await AgentSandboxProvider(agent_sandbox_settings("pool")).apply_template(client)
            yield Pool(client, "pool", work)
            assert not controller.failures, controller.failures


async def test_a_session_adopts_the_warm_member_and_another_holder_reattaches(pool: Pool) -> None:
    (member,) = await eventually(pool.ready_members, limit_s=60, interval_s=0.2, what="a Ready pool member")
    pool.record_execs()
    first = pool.sessions()
    sandbox = await first.open(OpenOptions(ttl=120, labels={"team": "a"}, run_id="run-7"))
    assert (sandbox.info.backend, sandbox.info.labels, sandbox.info.run_id) == ("agent-sandbox", {"team": "a"}, "run-7")
    result = await sandbox.commands.run(["sh", "-c", "echo hi > note; pwd"])
    assert (result.exit_code, result.stdout.strip()) == (0, str(pool.work))
    await sandbox.files.write("d/x.txt", "in the pod")
    assert set(pool.execs) == {member}  # every request ran in the adopted member's pod
    await sandbox.disconnect()
    await first.release()  # the holder lets go: the claim lives on to its TTL
    async with pool.sessions() as second:
        assert [i.id for i in await second.find(run_id="run-7")] == [sandbox.id]
        again = await second.connect(sandbox.id)
        assert await again.files.read("d/x.txt") == b"in the pod"
        assert (await again.commands.run("cat note")).stdout == "hi\n"
        assert await second.close(sandbox.id) is True
        await again.disconnect()
    await eventually(pool.nothing_claimed, limit_s=CASCADE_S, interval_s=0.2, what="the claim and sandbox gone")
    refill = await eventually(pool.ready_members, limit_s=60, interval_s=0.2, what="the pool refilled")
    assert member not in refill


async def test_one_claim_reaper_pass_past_the_ttl_deletes_a_lost_holders_claim(pool: Pool) -> None:
    await eventually(pool.ready_members, limit_s=60, interval_s=0.2, what="a Ready pool member")
    lost = pool.sessions()
    sandbox = await lost.open(OpenOptions(ttl=60))
    await sandbox.disconnect()
    await lost.release()  # as after a SIGKILL of the holder
    res = claims.resources()
    early = await claims.reap_claims(pool.api, res.claims, pool.namespace)
    assert early.claims == ()
    late = await claims.reap_claims(pool.api, res.claims, pool.namespace, now=math.ceil(sandbox.info.expires_at) + 1)
    assert late.claims == (sandbox.id,)
    await eventually(pool.nothing_claimed, limit_s=CASCADE_S, interval_s=0.2, what="the claim and sandbox gone")


async def test_an_environment_is_refused_the_template_has_its_own(pool: Pool) -> None:
    async with pool.sessions() as sessions:
        with pytest.raises(errors.ConfigError, match="run with the template's environment"):
            await sessions.open(OpenOptions(ttl=60, env={"A": "1"}))
    assert await pool.claimed() == []
