"""The demand scaler on a real kube-apiserver and the REAL agent-sandbox controller (v1.0.3), kwok
as the kubelet, running as the ServiceAccount ``render warm-pool --autoscale`` renders (its Role's
verbs and nothing more): a burst of claims raises the warm pool's replicas through its scale
subresource, and the controller makes the members; idleness lowers them one step per cooldown,
down to min.

Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from tests.fakes.sandbox_cli import run_sandbox

from ironflow import errors
from ironflow.agent_sandbox import autoscale, claims, demand, models, pool_scaler, rendering
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.testing.kubeenv import KubeEnv
from ironflow.testing.polling import eventually, eventually_sync

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
RES = claims.resources()
SETTLE_S = 60.0
#: 6 claims in a 20 s window, 20 s to get ready: 6 in flight + 1 spare, capped at max 4.
POLICY = demand.DemandPolicy(min_replicas=1, max_replicas=4, spare=1, ready_s=20, window_s=20, cooldown_s=3)


@pytest.fixture
def ns(kube_env: KubeEnv) -> Iterator[str]:
    with kube_env.namespace(f"scale-{uuid.uuid4().hex[:8]}", labels=RESTRICTED) as name:
        yield name


def _claim(ns: str, name: str, pool: str) -> dict[str, Any]:
    return rendering.render(models.SandboxClaim(name=name, namespace=ns, warm_pool=pool))


@pytest.mark.timeout(180)
async def test_a_burst_of_claims_raises_the_pool_and_idleness_lowers_it_after_the_cooldown(
    kube_env: KubeEnv, ns: str
) -> None:
    pod = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(ns)
    provider = AgentSandboxProvider(pod).warm_pool("demand", replicas=1)
    await asyncio.to_thread(kube_env.provide_volumes, 4)
    decisions: list[tuple[demand.Decision, bool]] = []
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        await provider.apply_template(api)

        async def pool() -> dict[str, Any]:
            return await api.get(RES.pools, ns, "demand")

        async def replicas_are(n: int, *, ready: bool = False) -> bool:
            got = await pool()
            status = got.get("status") or {}
            return got["spec"]["replicas"] == n and (not ready or status.get("readyReplicas") == n)

        await eventually(lambda: replicas_are(1, ready=True), limit_s=SETTLE_S, interval_s=0.2)
        rbac = [o for o in autoscale.demand_scaler(await pool(), POLICY) if o["kind"] != "Deployment"]
        await asyncio.to_thread(kube_env.apply_objects, rbac, namespace=ns)
        token = await asyncio.to_thread(kube_env.service_account_token, ns, "demand-scaler")
        scaler_api = await k8s.KubeApi.connect(kube_env.token_config(token))
        with pytest.raises(errors.KubeForbidden):  # the pool's spec is not the scaler's: only its /scale
            await scaler_api.patch(RES.pools, ns, "demand", {"spec": {"replicas": 2}})
        scaler = pool_scaler.PoolScaler(
            scaler_api, ns, "demand", POLICY, tick_s=0.3, report=lambda d, w: decisions.append((d, w))
        )
        running = asyncio.create_task(scaler.run())
        try:
            await eventually(lambda: bool(decisions), limit_s=10, interval_s=0.1)
            assert scaler.writes == 0, "no claims, one ready member: the pool holds at min"
            assert decisions[0][0].reason.startswith("hold 1")

            for i in range(6):  # a claim on another pool is no demand on this one
                await api.create(RES.claims, ns, _claim(ns, f"burst-{i}", "demand"))
            await api.create(RES.claims, ns, _claim(ns, "elsewhere", "other-pool"))
            await eventually(lambda: replicas_are(4), limit_s=10, interval_s=0.1)
            # Each claim's event raised it at once (1 claim: 3/min x 20 s = 1 in flight + 1 spare = 2, ...).
            # The first raise counts the claims that had come when the scaler looked: one, or on a busy
            # machine a few created between two of its reads; its line says so by the same sum.
            ups = [d for d, written in decisions if written]
            seen = round(ups[0].per_minute / 3)
            assert ups[0].per_minute == 3.0 * seen, ups[0]
            assert 1 <= seen <= 6, ups[0]
            if seen + 1 <= 4:  # under the max: the sum as it stands
                assert ups[0].reason == (
                    f"up to {seen + 1}: {3.0 * seen} claims/min x 20s ready time = {seen} in flight + 1 spare"
                )
            else:
                assert ups[0].reason.startswith("up to 4 (max): "), ups[0]
            assert [d.replicas for d in ups] == sorted(d.replicas for d in ups)
            assert ups[-1].replicas == 4
            # All six seen (18/min x 20 s = 6 in flight + 1 spare = 7): max 4 holds.
            await eventually(lambda: any(d.per_minute == 18.0 for d, _ in decisions), limit_s=10, interval_s=0.1)
            assert all(d.replicas == 4 for d, _ in decisions if d.per_minute == 18.0)
            got = await pool()
            # Written through the scale subresource, never the pool's spec: the field manager says so.
            assert any(m.get("subresource") == "scale" for m in got["metadata"]["managedFields"])
            # The real controller makes the members the scale asked for.
            await eventually(lambda: _status_replicas_at_least(api, ns, 4), limit_s=SETTLE_S, interval_s=0.2)

            idle_from = len(decisions)
            for i in range(6):
                await api.delete(RES.claims, ns, f"burst-{i}")
            # The window (20 s) empties, then one member per 3 s cooldown, down to min 1.
            await eventually(lambda: replicas_are(1), limit_s=SETTLE_S, interval_s=0.2)
            downs = [d.reason for d, written in decisions[idle_from:] if written]
            assert downs, decisions
            assert all(r.startswith("down to ") for r in downs), downs
            assert [int(r.split()[2].rstrip(":")) for r in downs] == [3, 2, 1]
        finally:
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            await scaler_api.close()


async def _status_replicas_at_least(api: k8s.KubeApi, ns: str, n: int) -> bool:
    got = await api.get(RES.pools, ns, "demand")
    return int((got.get("status") or {}).get("replicas", 0)) >= n


@pytest.mark.timeout(120)
async def test_the_command_prints_each_change_and_stops_on_ctrl_c(kube_env: KubeEnv, ns: str) -> None:
    """``ironflow sandbox pool-scaler`` as a user runs it: a claim raises the pool, one stdout line
    says why; SIGINT ends it with one line, exit 130."""
    pod = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(ns)
    async with await k8s.KubeApi.connect(kube_env.cluster_config()) as api:
        await AgentSandboxProvider(pod).warm_pool("demand", replicas=1).apply_template(api)
        args = ["sandbox", "pool-scaler", "--pool", "demand", "-n", ns, "--max", "3", "--window", "20s"]
        args += ["--ready-time", "20s", "--kubeconfig", str(kube_env.kubeconfig_path)]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from ironflow.cli.app import main; main()", *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await api.create(RES.claims, ns, _claim(ns, "one", "demand"))
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                line = (await proc.stdout.readline()).decode().strip()
            assert line == "sandboxwarmpool/demand up to 2: 3.0 claims/min x 20s ready time = 1 in flight + 1 spare"
            assert (await api.get(RES.pools, ns, "demand"))["spec"]["replicas"] == 2
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 130
        assert err.decode().strip() == "error: interrupted"


def test_the_command_on_a_missing_pool_is_one_line_and_exit_3(kube_env: KubeEnv, ns: str) -> None:
    code, out, err = run_sandbox(
        "pool-scaler", "--pool", "nope", "-n", ns, "--kubeconfig", str(kube_env.kubeconfig_path)
    )
    assert (code, out) == (3, "")
    assert "nope" in err
    assert len(err.strip().splitlines()) == 1


def test_the_rendered_scaler_is_admitted_in_a_restricted_namespace(kube_env: KubeEnv, ns: str) -> None:
    """``render warm-pool --autoscale`` output applies as is; the Deployment's pod passes the
    restricted Pod Security level (the ReplicaSet controller creates it) under its own account."""
    code, out, err = run_sandbox("render", "warm-pool", "--name", "pool", "-n", ns, "--autoscale", "1:3")
    assert code == 0, err
    docs = [d for d in yaml.safe_load_all(out) if d and d["kind"] != "SandboxClaim"]
    kube_env.apply_objects(docs, namespace=ns)

    def scaler_pod() -> dict[str, Any] | None:
        pods = kube_env.request("GET", k8s.PODS.path(ns))["items"]
        return next((p for p in pods if p["metadata"]["name"].startswith("pool-scaler-")), None)

    found = eventually_sync(scaler_pod, limit_s=SETTLE_S, interval_s=0.2, what="the scaler's pod")
    assert found["spec"]["serviceAccountName"] == "pool-scaler"
    assert found["spec"]["containers"][0]["args"][:4] == ["sandbox", "pool-scaler", "--pool", "pool"]
