"""agent-sandbox steps: time and API requests per step, cold start versus warm adoption.

Runs AgentSandboxProvider steps against the Kubernetes test server, with the scripted
agent-sandbox controller standing in for the real one (it takes ``--cold-ms`` to start a
cold sandbox; warm members are already Ready) and a local ``claude`` stand-in that prints
real CLI output. What it measures is ironflow's own cost per step: the claim, the wait on the
shared claim watch, the execs (token, agent), the parse and the delete; plus the scripted
cold start. Targets: at most 10 API requests per step (execs included), and a warm step
faster than a cold one by at least the scripted cold start.

    python benchmarks/agent_sandbox.py [--runs 10] [--cold-ms 200]

Last line: ``RESULT cold_ms=… warm_ms=… saved_ms=… requests_per_step=…`` (medians; the worse
case's requests per step).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ironflow.agent_sandbox.provider import AgentSandboxProvider
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer, local_exec

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "claude" / "json_text.out"
TARGET_REQUESTS_PER_STEP = 10


class Issuer:
    """Issues constant tokens instantly: the auth proxy's cost is benchmarks/proxy.py's business."""

    async def issue(
        self, run_id: str, step: str, expires_at: int, *, credential: Any = None, trace_context: str | None = None
    ) -> tuple[str, Secret]:
        return "tok", Secret("ifap_benchmark_token")

    async def revoke(self, token_id: str) -> bool:
        return True

    async def revoke_run(self, run_id: str) -> int:
        return 0


async def _steps(*, warm: bool, runs: int, cold_ms: float, work: Path) -> tuple[list[float], float]:
    claude = work / "claude"
    claude.write_text(f"#!/bin/sh\ncat '{FIXTURE}'\n")
    claude.chmod(0o755)
    ns = "warm" if warm else "cold"
    async with KubeTestServer() as server:
        server.serve_exec(local_exec({"HOME": str(work)}))
        controller = AgentSandboxController(server, namespace=ns, cold_start_s=cold_ms / 1000, interval_s=0.005)
        async with controller, await k8s.KubeApi.connect(server.cluster_config()) as api:
            pod = (
                K8sEphemeralProvider.sandboxed("img")
                .namespace(ns)
                .claude_path(str(claude))
                .auth_proxy("http://proxy:8080")
            )
            provider = AgentSandboxProvider(pod).warm_pool(replicas=2 if warm else 0)
            await provider.apply_template(api)
            runner = provider.runner(api=api, issuer=Issuer(), worker_env={})
            times: list[float] = []
            api.counters.reset()
            for i in range(runs):
                if warm:  # a Ready member is waiting, as in a steady pool
                    while sum(1 for e in controller.events if e[0] == "member") - i < 1:  # noqa: ASYNC110 - a list
                        await asyncio.sleep(0.005)
                    await asyncio.sleep(0.05)
                start = time.perf_counter()
                await runner.run(AgentConfig("hi").scoped("bench", f"s{i}"))
                times.append((time.perf_counter() - start) * 1000)
            stats = api.counters.snapshot()
            requests = (stats.total - stats.by_verb.get("watch", 0)) / runs
            kinds = [e[0] for e in controller.events]
            if warm and kinds.count("warm") != runs:
                sys.exit(f"expected {runs} warm adoptions, the controller did {kinds}")
            return times, requests


async def main(runs: int, cold_ms: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cold, cold_req = await _steps(warm=False, runs=runs, cold_ms=cold_ms, work=Path(tmp))
        warm, warm_req = await _steps(warm=True, runs=runs, cold_ms=cold_ms, work=Path(tmp))
    cold_median, warm_median = statistics.median(cold), statistics.median(warm)
    head = f"{'case':<10} {'median ms':>10} {'p90 ms':>10} {'requests/step':>14}"
    print(f"{head}   ({runs} steps, cold start {cold_ms:g} ms)")
    for name, times, req in (("cold", cold, cold_req), ("warm", warm, warm_req)):
        p90 = sorted(times)[math.ceil(len(times) * 0.9) - 1]  # nearest rank
        print(f"{name:<10} {statistics.median(times):>10.1f} {p90:>10.1f} {req:>14.1f}")
    saved = cold_median - warm_median
    ok = max(cold_req, warm_req) <= TARGET_REQUESTS_PER_STEP and saved >= cold_ms * 0.8
    verdict = "met" if ok else "MISSED"
    print(f"target: <= {TARGET_REQUESTS_PER_STEP} requests per step, warm saves the cold start: {verdict}")
    print(
        f"RESULT cold_ms={cold_median:.1f} warm_ms={warm_median:.1f} saved_ms={saved:.1f} "
        f"requests_per_step={max(cold_req, warm_req):.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="steps per case (default 10)")
    parser.add_argument("--cold-ms", type=float, default=200.0, help="scripted cold start (default 200 ms)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.cold_ms))
