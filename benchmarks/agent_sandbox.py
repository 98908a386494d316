"""agent-sandbox steps: time and API requests per step, cold start versus warm adoption; claims per second.

Runs AgentSandboxProvider steps against the Kubernetes test server, with the scripted
agent-sandbox controller standing in for the real one (it takes ``--cold-ms`` to start a
cold sandbox; warm members are already Ready) and a local ``claude`` stand-in that prints
real CLI output. What it measures is ironflow's own cost per step: the claim, the wait on the
shared claim watch, the execs (token, agent), the parse and the delete; plus the scripted
cold start. Targets: at most 10 API requests per step (execs included), and a warm step
faster than a cold one by at least the scripted cold start.

Claims per second: ``--parallel`` (20) claims at a time on a warm pool of ``--pool`` (40),
ironflow's claim (create, then the shared claim watch) against the upstream SDK's
``SandboxClient.create_sandbox`` (create, then a watch per claim) on the same pool, refilled
between the two, each client in a fresh process; the ratio is ironflow's rate over the SDK's
(target >= 1.0x). ``--backend real`` claims on the real controller v1.0.3 (kube-apiserver and
kwok, ``scripts/kube-testenv build``) instead of the test server and the scripted controller;
``--backend real-node`` on the real controller with a real node, whose pool members are running
pods of the built runner image (``scripts/kube-testenv build --node``, ``scripts/images build
runner``; use a smaller ``--pool`` there: every member is a real pod).

    python benchmarks/agent_sandbox.py [--runs 10] [--cold-ms 200] [--parallel 20] [--pool 40] [--rounds 4]
                                        [--backend test-server|real|real-node] [--no-claims]

Last line: ``RESULT cold_ms=… warm_ms=… saved_ms=… requests_per_step=… claims_per_s=…
sdk_claims_per_s=… ratio=…`` (medians; the worse case's requests per step; without the claims
keys under ``--no-claims``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from ironflow import labels
from ironflow.agent_sandbox import claim_sessions, claims, lifecycle
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.cluster import image_builds
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import K8sResources
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import KubeTestServer, local_exec

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "claude" / "json_text.out"
TARGET_REQUESTS_PER_STEP = 10


async def _steps(*, warm: bool, runs: int, cold_ms: float, work: Path) -> tuple[list[float], float]:
    sys.path.insert(0, str(ROOT))  # the tests' in-memory issuer: tokens at once, the proxy is benchmarks/proxy.py's
    from tests.fakes.proxy_tokens import MemoryIssuer

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
            runner = provider.runner(
                api=api, issuer=MemoryIssuer(), worker_env={}
            )  # tokens at once: the proxy's cost is benchmarks/proxy.py's
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


async def main(runs: int, cold_ms: float) -> str:
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
    return (
        f"cold_ms={cold_median:.1f} warm_ms={warm_median:.1f} saved_ms={saved:.1f} "
        f"requests_per_step={max(cold_req, warm_req):.1f}"
    )


# --- claims per second: ironflow against the upstream SDK on the same warm pool --------------

CLAIMS_NS = "claims"


def _claims_provider(pool: int, backend: str = "test-server") -> AgentSandboxProvider:
    pod = K8sEphemeralProvider.sandboxed("img").namespace(CLAIMS_NS)
    if backend == "real-node":  # members really run: the built runner image, small requests (2 cores)
        runner = image_builds.local_reference(image_builds.IMAGES["runner"].reference)
        pod = K8sEphemeralProvider.sandboxed(runner).namespace(CLAIMS_NS).image_pull_policy("Never")
        pod = pod.resources(K8sResources(cpu_request="10m", memory_request="32Mi", ephemeral_storage_request=None))
    return AgentSandboxProvider(pod).warm_pool(replicas=pool)


async def _serve_claims(backend: str) -> None:
    """The child process: the cluster, until stdin closes; its kubeconfig on stdout.

    ``test-server``: the Kubernetes test server and the scripted controller; ``real``: a real
    kube-apiserver, kwok and the real controller v1.0.3 (``scripts/kube-testenv build``). In a
    process of their own, so neither client shares its interpreter (and GIL) with them.
    """
    if backend in ("real", "real-node"):
        # the built control plane (and node): only these backends need them
        from ironflow.testing import images
        from ironflow.testing.kubeenv import KubeEnv
        from ironflow.testing.realnode import RealNodeEnv

        runner = [images.archive_path(FIXTURE.parents[3], "runner")]
        with RealNodeEnv(images=runner, agent_sandbox=True) if backend == "real-node" else KubeEnv() as env:
            env.create_namespace(CLAIMS_NS)
            print(json.dumps({"kubeconfig": env.kubeconfig_path.read_text()}), flush=True)
            await asyncio.to_thread(sys.stdin.read)
        return
    async with KubeTestServer() as server:
        server.create_namespace(CLAIMS_NS)
        async with AgentSandboxController(server, namespace=CLAIMS_NS, interval_s=0.01):
            print(json.dumps({"kubeconfig": server.kubeconfig_yaml()}), flush=True)
            await asyncio.to_thread(sys.stdin.read)


async def _pool_refilled(api: k8s.KubeApi, res: claims.Resources, pool: int, limit_s: float = 60.0) -> None:
    """Until the namespace holds exactly ``pool`` Sandboxes, every one a Ready member (not timed)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        items = (await api.list_all(res.sandboxes, CLAIMS_NS)).items
        members = [s for s in items if labels.LABEL_WARM_POOL_SANDBOX in (s["metadata"].get("labels") or {})]
        if len(items) == pool and sum(claims.has_condition(s, "Ready") for s in members) == pool:
            return
        await asyncio.sleep(0.05)
    sys.exit(f"the warm pool did not refill to {pool} Ready members within {limit_s:g}s")


async def _ironflow_claims(api: k8s.KubeApi, provider: AgentSandboxProvider, parallel: int, total: int) -> float:
    """Seconds for ``total`` claims, ``parallel`` at a time: create, then wait Ready on the shared watch."""
    res, gate = provider.resources, asyncio.Semaphore(parallel)

    async def one() -> None:
        async with gate:
            name = "sbx-" + secrets.token_hex(8)
            body = claim_sessions.session_claim(name, provider.settings, ttl_s=600, now=time.time())
            await api.create(res.claims, CLAIMS_NS, body)
            if await claims.wait_ready(api, res.claims, CLAIMS_NS, name, timeout_s=60) is None:
                sys.exit(f"ironflow's claim {name} was not Ready within 60s")

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(total)))
    return time.perf_counter() - start


def _sdk_client(kubeconfig: str, parallel: int) -> Any:
    """The upstream SDK's client on the cluster of ``kubeconfig``, with a connection for every thread."""
    import kubernetes  # test dependencies (the SDK pulls the sync client): only this comparison needs them
    from k8s_agent_sandbox.sandbox_client import SandboxClient

    configuration = kubernetes.client.Configuration()
    load = kubernetes.config.load_kube_config_from_dict
    load(yaml.safe_load(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = parallel * 2  # no thread waits for a connection
    return SandboxClient(api_client=kubernetes.client.ApiClient(configuration))


def _sdk_claims(client: Any, pool_name: str, parallel: int, total: int) -> float:
    """Seconds for ``total`` ``create_sandbox`` calls of the upstream SDK, ``parallel`` threads at a time."""
    with ThreadPoolExecutor(parallel) as threads:
        start = time.perf_counter()
        list(threads.map(lambda _: client.create_sandbox(pool_name, CLAIMS_NS, sandbox_ready_timeout=60), range(total)))
        return time.perf_counter() - start


async def _adopted(api: k8s.KubeApi, pool_name: str) -> int:
    (status,) = [s for s in await lifecycle.pool_status(api, CLAIMS_NS) if s.name == pool_name]
    return status.adopted_last_hour


async def _claims_client(who: str, parallel: int, pool: int) -> None:
    """A child process playing one client: the server from stdin, one untimed claim (connections
    warm), ``ready``; on ``go``, the timed claims and their seconds on stdout."""
    served = json.loads(await asyncio.to_thread(sys.stdin.readline))
    provider = _claims_provider(pool)
    async with await k8s.KubeApi.connect(k8s.KubeconfigInline(served["kubeconfig"])) as api:
        sdk = _sdk_client(served["kubeconfig"], parallel) if who == "sdk" else None
        for n, reply in ((1, "ready"), (parallel, None)):
            if sdk is None:
                spent = await _ironflow_claims(api, provider, min(n, parallel), 1 if n == 1 else pool)
            else:
                spent = await asyncio.to_thread(_sdk_claims, sdk, provider.settings.pool, n, 1 if n == 1 else pool)
            print(reply or json.dumps(spent), flush=True)
            if reply:
                await asyncio.to_thread(sys.stdin.readline)  # "go": the parent refilled the pool


async def _child(*args: str) -> asyncio.subprocess.Process:
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(sys.executable, __file__, *args, stdin=pipe, stdout=pipe)


async def _line(child: asyncio.subprocess.Process) -> str:
    assert child.stdout is not None
    line = (await child.stdout.readline()).decode()
    if not line:
        sys.exit(f"a benchmark child process ended early (exit {await child.wait()})")
    return line


async def claims_main(*, parallel: int, pool: int, rounds: int, backend: str) -> str:
    """Claims per second of ironflow and of the SDK. Per round each client, in a fresh process of its
    own, makes one untimed claim, then ``pool`` claims on a full pool of ``pool``; the order alternates.
    The test server and the scripted controller run in a third process."""
    server = await _child("--serve-claims", "--backend", backend)
    assert server.stdin is not None
    served = await _line(server)
    provider = _claims_provider(pool, backend)
    res, pool_name = provider.resources, provider.settings.pool
    times: dict[str, list[float]] = {"ironflow": [], "sdk": []}
    adoptions: dict[str, list[int]] = {"ironflow": [], "sdk": []}
    try:
        async with await k8s.KubeApi.connect(k8s.KubeconfigInline(json.loads(served)["kubeconfig"])) as api:
            await provider.apply_template(api)
            for r in range(rounds):
                for who in ("ironflow", "sdk") if r % 2 == 0 else ("sdk", "ironflow"):
                    await _pool_refilled(api, res, pool, limit_s=120)  # the real GC: after its discovery
                    client = await _child("--claims-client", who, "--parallel", str(parallel), "--pool", str(pool))
                    assert client.stdin is not None
                    client.stdin.write(served.encode())
                    await _line(client)  # ready: its warm-up claim is Ready
                    await api.delete_collection(res.claims, CLAIMS_NS)
                    await _pool_refilled(api, res, pool)
                    client.stdin.write(b"go\n")
                    times[who].append(float(await _line(client)))
                    await client.wait()
                    adoptions[who].append(await _adopted(api, pool_name))
                    await api.delete_collection(res.claims, CLAIMS_NS)
    finally:
        server.stdin.close()
        await server.wait()
    rate, sdk_rate = pool / statistics.median(times["ironflow"]), pool / statistics.median(times["sdk"])
    ratio = rate / sdk_rate
    print(f"\nclaims on a warm pool of {pool}, {parallel} in parallel, {rounds} rounds (medians; {backend})")
    print(f"{'client':<10} {'claims/s':>10} {'seconds per round':>28} {'warm adoptions':>15}")
    for who, r_ in (("ironflow", rate), ("sdk", sdk_rate)):
        spent = ",".join(f"{t:.2f}" for t in times[who])
        print(f"{who:<10} {r_:>10.1f} {spent:>28} {min(adoptions[who]):>15}")
    print(f"target: ironflow >= 1.0x the SDK's create_sandbox: {'met' if ratio >= 1.0 else 'MISSED'} ({ratio:.2f}x)")
    return f"claims_per_s={rate:.1f} sdk_claims_per_s={sdk_rate:.1f} ratio={ratio:.2f}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="steps per case (default 10)")
    parser.add_argument("--cold-ms", type=float, default=200.0, help="scripted cold start (default 200 ms)")
    parser.add_argument("--parallel", type=int, default=20, help="claims at a time (default 20)")
    parser.add_argument("--pool", type=int, default=40, help="warm pool size, and claims per client (default 40)")
    parser.add_argument("--rounds", type=int, default=4, help="claims rounds per client, order alternating (default 4)")
    parser.add_argument("--no-claims", action="store_true", help="skip the claims-per-second comparison")
    parser.add_argument(
        "--backend",
        choices=("test-server", "real", "real-node"),
        default="test-server",
        help="claims: the cluster to claim on",
    )
    parser.add_argument("--serve-claims", action="store_true", help=argparse.SUPPRESS)  # child: the server
    parser.add_argument("--claims-client", choices=("ironflow", "sdk"), help=argparse.SUPPRESS)  # child: a client
    args = parser.parse_args()
    if args.serve_claims:
        asyncio.run(_serve_claims(args.backend))
        sys.exit(0)
    if args.claims_client:
        asyncio.run(_claims_client(args.claims_client, args.parallel, args.pool))
        sys.exit(0)
    result = asyncio.run(main(args.runs, args.cold_ms))
    if not args.no_claims:
        result += " " + asyncio.run(
            claims_main(parallel=args.parallel, pool=args.pool, rounds=args.rounds, backend=args.backend)
        )
    print(f"RESULT {result}")
