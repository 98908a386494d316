"""Step latency on a real kube-apiserver with kwok, and agent-sandbox claim latency.

What it measures, on one cluster started by ``ironflow.testing.kubeenv.KubeEnv``:

* ``step``: time from ``provider.run(config)`` to its result for one step (sequential runs),
  then p50/p95 over ``--concurrent`` (default 50) steps started together. kwok runs each pod
  for ``--run-for`` (default 0ms) then ends it Succeeded; the log is a captured stream-json
  output of the real Claude CLI, read through the apiserver.
* ``sdk_claim``: time from ``k8s_agent_sandbox.SandboxClient.create_sandbox`` (PyPI
  ``k8s-agent-sandbox==1.0.8``) to ready, for claims against a warm pool whose sandboxes
  are already Ready (the real agent-sandbox controller, pods made Running by kwok).

Prints a table and a last line ``RESULT step_p50_ms=… step_p95_ms=… single_step_p50_ms=…
sdk_claim_p50_ms=… cluster_start_s=…`` (step_* over the concurrent steps).
Needs ``scripts/kube-testenv build`` first. Run: ``python benchmarks/real_step_latency.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig
from ironflow.testing.kubeenv import EXIT_CODE_LABEL, RUN_FOR_LABEL, KubeEnv

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
STREAM_TEXT = (ROOT / "tests" / "fixtures" / "claude" / "stream_text.out").read_text()
IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
EXT = "/apis/extensions.agents.x-k8s.io/v1beta1"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def steps(env: KubeEnv, ns: str, *, sequential: int, concurrent: int, run_for: str) -> dict[str, list[float]]:
    provider = K8sEphemeralProvider.sandboxed(IMAGE).namespace(ns).timeout(120).cluster(env.cluster_config())
    config = dataclasses.replace(
        AgentConfig("Say hello").pod_label(EXIT_CODE_LABEL, "0").pod_label(RUN_FOR_LABEL, run_for), verbose=True
    )

    async def one() -> float:
        start = time.perf_counter()
        result = await provider.run(config)
        assert result.text
        return (time.perf_counter() - start) * 1000

    try:
        await one()  # warm-up: connection, informer, first scheduling
        single = [await one() for _ in range(sequential)]
        many = list(await asyncio.gather(*(one() for _ in range(concurrent))))
    finally:
        await provider.aclose()
    return {"single": single, "concurrent": many}


def sdk_claims(env: KubeEnv, ns: str, *, claims: int) -> list[float]:
    """Claims against a warm pool with ``claims`` Ready sandboxes, one after the other."""
    import kubernetes  # the SDK's own (sync) client; only this benchmark uses it
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
    from k8s_agent_sandbox.sandbox_client import SandboxClient

    pod = {
        "spec": {
            "containers": [
                {"name": "runtime", "image": "registry.invalid/runtime:1", "ports": [{"containerPort": 8888}]}
            ]
        }
    }
    template = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": "bench", "namespace": ns},
        "spec": {"podTemplate": pod},
    }
    pool = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "bench-pool", "namespace": ns},
        "spec": {"replicas": claims, "sandboxTemplateRef": {"name": "bench"}},
    }
    env.request("POST", f"{EXT}/namespaces/{ns}/sandboxtemplates", template)
    env.request("POST", f"{EXT}/namespaces/{ns}/sandboxwarmpools", pool)
    deadline = time.monotonic() + 120
    while True:  # wait for the pool to be warm: every sandbox Ready
        boxes = env.request("GET", f"/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes").get("items", [])
        ready = [
            b
            for b in boxes
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in b.get("status", {}).get("conditions", [])
            )
        ]
        if len(ready) >= claims:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"warm pool not ready after 120s: {len(ready)}/{claims} sandboxes Ready")
        time.sleep(0.2)

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(env.kubeconfig_path), client_configuration=cfg
    )
    client: Any = SandboxClient(
        connection_config=SandboxDirectConnectionConfig(api_url="http://127.0.0.1:9"),  # never dialled here
        api_client=kubernetes.client.ApiClient(cfg),
    )
    out = []
    for _ in range(claims):
        start = time.perf_counter()
        client.create_sandbox("bench-pool", namespace=ns, sandbox_ready_timeout=60)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=10, help="single steps, one after the other")
    parser.add_argument("--concurrent", type=int, default=50, help="steps started together")
    parser.add_argument("--claims", type=int, default=5, help="SDK claims against the warm pool")
    parser.add_argument("--run-for", default="0ms", help="how long kwok keeps each pod Running (Go duration)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    with KubeEnv() as env:
        boot_s = time.perf_counter() - started
        env.create_namespace("bench-steps", labels=RESTRICTED)
        env.set_namespace_log("bench-steps", STREAM_TEXT)
        res = asyncio.run(
            steps(env, "bench-steps", sequential=args.sequential, concurrent=args.concurrent, run_for=args.run_for)
        )
        env.create_namespace("bench-sdk")
        claims = sdk_claims(env, "bench-sdk", claims=args.claims)

    rows: list[tuple[str, Any, float, float, float]] = [
        ("single step (sequential)", len(res["single"]), *_stats(res["single"])),
        (f"{args.concurrent} concurrent steps", len(res["concurrent"]), *_stats(res["concurrent"])),
        ("SDK claim -> ready (warm pool)", len(claims), *_stats(claims)),
    ]
    print(f"cluster start: {boot_s:.1f}s", file=sys.stderr)
    print(f"{'measure':34} {'n':>4} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}")
    for name, n, p50, p95, mx in rows:
        print(f"{name:34} {n:>4} {p50:>9.1f} {p95:>9.1f} {mx:>9.1f}")
    print(
        f"RESULT step_p50_ms={pct(res['concurrent'], 0.5):.1f} step_p95_ms={pct(res['concurrent'], 0.95):.1f} "
        f"single_step_p50_ms={statistics.median(res['single']):.1f} sdk_claim_p50_ms={statistics.median(claims):.1f} "
        f"cluster_start_s={boot_s:.1f}"
    )
    return 0


def _stats(values: list[float]) -> tuple[float, float, float]:
    return pct(values, 0.5), pct(values, 0.95), max(values)


if __name__ == "__main__":
    raise SystemExit(main())
