"""On a real node: a step whose ``AgentConfig.timeout`` is shorter than the provider's ends at the
step's bound. The real Claude Code CLI in the runner image talks through the auth proxy to the
offline model server, whose one turn hangs (``delay_s``) far past both bounds; the step fails with
``AgentTimeout`` naming the step's bound (not the provider's), well before the provider's bound,
and its pod is gone after. Skipped when the node's binaries or the runner, auth-proxy and worker
images are missing.
"""

from __future__ import annotations

import time
import uuid
from typing import Final

import pytest
from tests.fakes import real_node_proxy as rp
from tests.k8s.real_node.test_real_node_agent_step import model_behind_proxy

from ironflow import errors
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

pytestmark = pytest.mark.timeout(600)  # the node's start (images loaded) counts in the first test

STEP_S: Final = 20
PROVIDER_S: Final = 300
#: The offline model server whose one turn answers after an hour: the CLI waits on it.
HANGING_SERVER: Final = """
import asyncio, os, sys
from ironflow.fake_model.server import FakeAnthropic
from ironflow.fake_model.script import Script, TextTurn

async def main():
    script = Script.of(TextTurn("too late", delay_s=3600))
    fake = FakeAnthropic(script, host="0.0.0.0", port=int(sys.argv[2]), required_credential=os.environ["MODEL_KEY"])
    await fake.start()
    print("serving", flush=True)
    while True:
        await asyncio.sleep(1)
        if fake.message_requests:
            print("asked", flush=True)

asyncio.run(main())
"""


async def test_a_step_shorter_than_its_provider_ends_at_its_own_bound(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    runner_image = need_image["runner"]
    async with model_behind_proxy(real_node, node_api, need_image, server=HANGING_SERVER) as found:
        config, proxy, model_ns, key = found
        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(config.namespace).auth_proxy(proxy.url)
        step = AgentConfig("Answer slowly.").account_lease(AccountLease("acct-1", "ANTHROPIC_API_KEY", key))
        scoped = step.with_timeout(STEP_S).scoped(f"run-{uuid.uuid4().hex[:6]}", "slow")
        started = time.monotonic()
        with pytest.raises(errors.AgentTimeout) as caught:
            await rp.run_step(real_node, proxy, provider.timeout(PROVIDER_S).settings, node_api, scoped)
        took = time.monotonic() - started
        assert (caught.value.bound, caught.value.limit_s) == ("step", STEP_S)
        assert str(caught.value) == f"agent timed out after {STEP_S}s (the step's timeout)"
        assert STEP_S <= took < PROVIDER_S / 2, took  # the start and the cleanup are in it, not the provider's bound
        # The model was asked: the CLI ran and waited on the hanging turn, not on a pod that never started.
        assert "asked" in await node_api.read_log(model_ns, "fake-model")
        print(f"step bound {STEP_S}s fired after {took:.1f}s")

        async def nothing_left() -> bool:
            return not (await node_api.list(k8s.PODS, config.namespace)).items

        await eventually(nothing_left, limit_s=60, interval_s=0.5, what="the step's pod deleted")
