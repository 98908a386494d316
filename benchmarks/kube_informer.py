"""One shared pod watch against one watch per waiter: connections, requests and wake-up latency.

Run: ``python benchmarks/kube_informer.py [--sizes 1,100,500]``.

For each N, N pods wait in one namespace of an in-process ``KubeTestServer``; the test then
marks every pod Succeeded at once. "shared" waits through ``informer_for(api, ns).wait_for``
(one list + one watch, whatever N); "per-pod" opens one field-selected watch per pod, as the
reference implementation does. Measured: watch connections opened, API requests, and the time
from the last phase change to the last waiter waking (p50/p99 over waiters).

The last line is ``RESULT shared_watch_connections=... shared_requests_per_wait=...
shared_wake_p99_ms=... per_pod_watch_connections=...`` for the largest N.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from typing import Any

from ironflow.kube import api, informer, pod_status
from ironflow.testing.kube import KubeTestServer

NAMESPACE = "bench"


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], "restartPolicy": "Never"},
    }


async def _per_pod_wait(kube: api.KubeApi, name: str, rv: str) -> float:
    async with contextlib.aclosing(
        kube.watch(api.PODS, NAMESPACE, resource_version=rv, field_selector=f"metadata.name={name}")
    ) as events:
        async for event in events:
            if pod_status.pod_finished(event.object):
                return time.perf_counter()
    raise RuntimeError("watch ended")


async def _shared_wait(kube: api.KubeApi, name: str) -> float:
    pod = await informer.informer_for(kube, NAMESPACE).wait_for(name, pod_status.pod_finished, 60)
    if pod is None:
        raise RuntimeError(f"{name} did not finish")
    return time.perf_counter()


async def measure(n: int, mode: str) -> dict[str, float]:
    server = KubeTestServer(namespaces=(NAMESPACE,))
    # per-pod needs a connection per watch; the shared informer needs one in all
    async with server, await api.KubeApi.connect(server.cluster_config(), max_connections=n + 16) as kube:
        names = [f"p-{i}" for i in range(n)]
        for name in names:
            await kube.create(api.PODS, NAMESPACE, _pod(name))
        rv = (await kube.list(api.PODS, NAMESPACE, limit=1)).resource_version
        before = kube.counters.snapshot()
        if mode == "shared":
            waits = [asyncio.create_task(_shared_wait(kube, name)) for name in names]
        else:
            waits = [asyncio.create_task(_per_pod_wait(kube, name, rv)) for name in names]
        for _ in range(3000):  # until every watch is open (bounded: 30 s)
            if server.open_watches >= (1 if mode == "shared" else n):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        for name in names:
            server.set_pod_phase(NAMESPACE, name, "Succeeded")
        changed = time.perf_counter()
        woke = await asyncio.gather(*waits)
        after = kube.counters.snapshot()
        latencies = sorted((t - changed) * 1000 for t in woke)
        requests = after.total - before.total
        return {
            "watches": after.watches_opened - before.watches_opened,
            "requests_per_wait": requests / n,
            "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        }


async def main(sizes: list[int]) -> None:
    print(f"{'N':>6} {'mode':>8} {'watches':>8} {'req/wait':>9} {'p50 ms':>8} {'p99 ms':>8}")
    last: dict[str, dict[str, float]] = {}
    for n in sizes:
        for mode in ("shared", "per-pod"):
            result = await measure(n, mode)
            last[mode] = result
            print(
                f"{n:>6} {mode:>8} {result['watches']:>8.0f} {result['requests_per_wait']:>9.3f} "
                f"{result['p50_ms']:>8.1f} {result['p99_ms']:>8.1f}"
            )
    shared, per_pod = last["shared"], last["per-pod"]
    print(
        f"RESULT shared_watch_connections={shared['watches']:.0f} "
        f"shared_requests_per_wait={shared['requests_per_wait']:.3f} "
        f"shared_wake_p99_ms={shared['p99_ms']:.1f} "
        f"per_pod_watch_connections={per_pod['watches']:.0f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,100,500", help="comma-separated numbers of waiters")
    args = parser.parse_args()
    asyncio.run(main([int(s) for s in args.sizes.split(",")]))
