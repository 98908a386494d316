"""N agent steps in flight at once against the Kubernetes API test server: requests, watches, memory.

Run: ``python benchmarks/concurrent_steps.py [--sizes 1,100,500] [--run-for 4]``.

The ``KubeTestServer`` runs in a child process (so its own memory is not counted); each step
is a real ``StepRunner.invoke`` with run/step labels (so the previous-attempt cleanup runs),
through one shared ``KubeApi``. Measured on the client side:

* ``requests_per_step``: every API request of the batch except watch connections (counted
  apart) divided by the number of successful steps; the shared watch's initial list is
  included. Targets: <= 6.
* ``watch_connections``: watch connections opened during the batch (target: exactly 1 per
  namespace, whatever N).
* ``rss_kib_per_step``: (peak RSS while every step is in flight - RSS before) / N, in KiB
  (target: <= 200).

The last line is ``RESULT requests_per_step=... watch_connections=... rss_kib_per_step=...``,
with the worst value over the sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as kube
from ironflow.steps import AgentConfig

NAMESPACE = "bench"
RESULT_LINE = json.dumps(
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 12,
        "result": "done",
        "session_id": "00000000-0000-0000-0000-000000000001",
        "total_cost_usd": 0.0001,
        "usage": {"input_tokens": 10, "output_tokens": 2},
        "modelUsage": {"claude-sonnet": {}},
    }
)


def rss_kib() -> int:
    """This process's resident set size in KiB (Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


# --- the server process ------------------------------------------------------------------


async def serve(run_for: float) -> None:
    from ironflow.testing.kube import KubeTestServer, PodScript

    async with KubeTestServer(namespaces=("default", NAMESPACE), history_size=100_000) as server:
        server.script_pods(
            PodScript(name_prefix="claude-code", start_after=0.01, run_for=run_for, log=RESULT_LINE + "\n")
        )
        print(json.dumps({"kubeconfig": server.kubeconfig_yaml()}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin


# --- the client ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    n: int
    ok: int
    seconds: float
    requests_per_step: float
    watch_connections: int
    max_in_flight: int
    rss_kib_per_step: float


async def batch(api: kube.KubeApi, runner: StepRunner, n: int, run_id: str) -> Row:
    api.counters.reset()
    base_rss = rss_kib()
    peak_rss = base_rss
    in_flight = 0
    max_in_flight = 0

    async def step(i: int) -> bool:
        nonlocal in_flight, max_in_flight
        in_flight += 1
        max_in_flight = max(max_in_flight, in_flight)
        try:
            await runner.run(AgentConfig("Say hello").scoped(run_id, f"step-{i}"))
            return True
        except Exception as exc:  # a failed step is counted, not fatal
            print(f"step {i} failed: {exc}", file=sys.stderr)
            return False
        finally:
            in_flight -= 1

    started = time.monotonic()
    tasks = [asyncio.ensure_future(step(i)) for i in range(n)]
    while not all(t.done() for t in tasks):
        created = api.counters.by_verb["create"]
        deleted = api.counters.by_verb["delete"]
        if created - deleted >= n or created >= n:  # every pod exists: all steps are waiting
            peak_rss = max(peak_rss, rss_kib())
        await asyncio.sleep(0.05)
    results = [t.result() for t in tasks]
    seconds = time.monotonic() - started
    stats = api.counters.snapshot()
    ok = sum(results)
    requests = stats.total - stats.by_verb.get("watch", 0)
    return Row(
        n=n,
        ok=ok,
        seconds=seconds,
        requests_per_step=requests / max(ok, 1),
        watch_connections=stats.watches_opened,
        max_in_flight=max_in_flight,
        rss_kib_per_step=max(0, peak_rss - base_rss) / n,
    )


def main(sizes: list[int], run_for: float) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--run-for", str(run_for)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        kubeconfig = json.loads(child.stdout.readline())["kubeconfig"]
        rows = asyncio.run(measure(kubeconfig, sizes))
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
    report(rows)


async def measure(kubeconfig: str, sizes: list[int]) -> list[Row]:
    api = await kube.KubeApi.connect(kube.KubeconfigInline(kubeconfig), max_connections=256, request_timeout_s=120)
    async with api:
        provider = (
            K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1").namespace(NAMESPACE).timeout(120)
        )
        runner = StepRunner.of(provider.settings, api=api, worker_env={})
        await batch(api, runner, 1, "warm-up")  # imports, connection pool, first watch
        return [await batch(api, runner, n, f"bench-{n}") for n in sizes]


def report(rows: list[Row]) -> None:
    header = f"{'N':>5} {'ok':>5} {'seconds':>8} {'req/step':>9} {'watches':>8} {'in-flight':>10} {'KiB/step':>9}"
    print(header)
    for r in rows:
        print(
            f"{r.n:>5} {r.ok:>5} {r.seconds:>8.2f} {r.requests_per_step:>9.2f} {r.watch_connections:>8} "
            f"{r.max_in_flight:>10} {r.rss_kib_per_step:>9.1f}"
        )
    worst: dict[str, Any] = {
        "requests_per_step": max(r.requests_per_step for r in rows),
        "watch_connections": max(r.watch_connections for r in rows),
        "rss_kib_per_step": max(r.rss_kib_per_step for r in rows if r.n > 1) if any(r.n > 1 for r in rows) else 0.0,
    }
    print(
        f"RESULT requests_per_step={worst['requests_per_step']:.2f} watch_connections={worst['watch_connections']} "
        f"rss_kib_per_step={worst['rss_kib_per_step']:.1f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,100,500", help="comma-separated numbers of in-flight steps")
    parser.add_argument("--run-for", type=float, default=4.0, help="seconds each fake pod runs")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.run_for))
    else:
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
        main([int(x) for x in args.sizes.split(",")], args.run_for)
