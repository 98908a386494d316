"""Pod latency on a real node (kubelet, containerd, runc, gVisor), ironflow against a bare pod.

What it measures, on one node started by ``ironflow.testing.realnode.RealNodeEnv``:

* ``bare``: a pod of the runner image running ``true``, created with the API and watched to
  ``Succeeded`` (no ironflow), then deleted: the floor a cluster gives.
* ``ironflow``: the same command through ``PodRun`` (ironflow's hardened, restricted pod: read-only
  root, no capabilities, seccomp, non-root; its input ConfigMap, its watch, its log read and its
  cleanup), from ``run()`` to its result.

Both for runc and for RuntimeClass ``gvisor``, p50 of ``--count`` (default 20) runs each, in
alternation so load drifts hit both. Target: ironflow ≤ 1.2× the bare pod. Prints a table and a
last line ``RESULT runc_ratio=… runc_bare_p50_ms=… runc_ironflow_p50_ms=… gvisor_ratio=…
gvisor_bare_p50_ms=… gvisor_ironflow_p50_ms=… node_start_s=…``.

Needs ``scripts/kube-testenv build --node`` and ``scripts/images build runner``.
Run: ``python benchmarks/real_node.py [--count N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ironflow.cluster import image_builds
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.kube import api as k8s
from ironflow.testing import images
from ironflow.testing.realnode import RealNodeEnv

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
TARGET = 1.2


def _bare_pod(name: str, image: str, runtime: str | None) -> dict[str, Any]:
    """The smallest pod PSA restricted admits: what any user would write by hand."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "true"],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if runtime:
        spec["runtimeClassName"] = runtime
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def bare(api: k8s.KubeApi, ns: str, image: str, runtime: str | None) -> float:
    name = f"bare-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    await api.create(k8s.PODS, ns, _bare_pod(name, image, runtime))
    while True:
        pod = await api.get(k8s.PODS, ns, name)
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            break
        await asyncio.sleep(0.05)
    elapsed = (time.perf_counter() - start) * 1000
    await api.delete(k8s.PODS, ns, name)
    return elapsed


async def ironflow(api: k8s.KubeApi, ns: str, image: str, runtime: str | None) -> float:
    run = PodRun("bench", image, "true").namespace(ns).restricted(read_only_root=True).timeout(120)
    if runtime:
        run = run.runtime_class(runtime)
    start = time.perf_counter()
    out = await run.run(api)
    assert out.success, out
    return (time.perf_counter() - start) * 1000


async def measure(env: RealNodeEnv, image: str, count: int) -> dict[str, dict[str, list[float]]]:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    env.create_namespace(ns, labels=RESTRICTED)
    api = await k8s.KubeApi.connect(env.cluster_config())
    out: dict[str, dict[str, list[float]]] = {}
    try:
        for runtime in (None, "gvisor"):
            key = runtime or "runc"
            out[key] = {"bare": [], "ironflow": []}
            await bare(api, ns, image, runtime)  # warm-up: first container of the runtime
            await ironflow(api, ns, image, runtime)
            for _ in range(count):
                out[key]["bare"].append(await bare(api, ns, image, runtime))
                out[key]["ironflow"].append(await ironflow(api, ns, image, runtime))
    finally:
        await api.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args(argv)
    runner = images.archive_path(ROOT, "runner")
    if not runner.exists():
        print("the runner image is not built: bash scripts/images build runner", file=sys.stderr)
        return 2
    image = image_builds.local_reference(image_builds.IMAGES["runner"].reference)
    started = time.perf_counter()
    with RealNodeEnv(images=[runner]) as env:
        node_start = time.perf_counter() - started
        results = asyncio.run(measure(env, image, args.count))
    print(f"{'runtime':8} {'bare p50 ms':>12} {'ironflow p50 ms':>16} {'ratio':>7}  target ≤ {TARGET}×")
    fields = []
    for runtime, runs in results.items():
        b, i = statistics.median(runs["bare"]), statistics.median(runs["ironflow"])
        ratio = i / b
        verdict = "met" if ratio <= TARGET else "NOT met"
        print(f"{runtime:8} {b:12.0f} {i:16.0f} {ratio:7.2f}  {verdict}")
        fields += [f"{runtime}_ratio={ratio:.2f}", f"{runtime}_bare_p50_ms={b:.0f}"]
        fields.append(f"{runtime}_ironflow_p50_ms={i:.0f}")
    print(f"node start (images loaded): {node_start:.1f} s; {args.count} runs each")
    print("RESULT " + " ".join([*fields, f"node_start_s={node_start:.1f}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
