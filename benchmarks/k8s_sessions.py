"""What a Kubernetes sandbox session costs: opening, a command's round trip through exec, a file.

On the in-process kube test server (each exec runs on this machine, as ``local_exec``), and
on the real kube-apiserver with kwok (its ``ClusterExec`` rule, the same) when
``scripts/kube-testenv build`` has built it; interleaved so a busy machine slows each alike:

- opening a session (pod created, Running, one request through it), p50;
- ``true`` in an open session minus a bare ``KubeApi.exec`` of ``true`` (what the runtime's
  boot adds to each request: its files on stdin, a Python start), p50;
- writing then reading a 1 MiB file, p50.

    python benchmarks/k8s_sessions.py [--runs 20]

One line of figures per cluster, then the RESULT line of the last one measured (the real
kube-apiserver's when it runs: ``real_apiserver=1``); ``rtt_vs_exec`` is a command in a session
over a bare exec of the same command, measured side by side:
``RESULT real_apiserver=… open_p50_ms=… exec_p50_ms=… rtt_p50_ms=… boot_added_ms=… rtt_vs_exec=… file_1mib_ms=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.sessions import OpenOptions
from ironflow.testing.kube import KubeTestServer, local_exec
from ironflow.testing.kubeenv import KubeEnv, KubeEnvNotAvailable


async def _ms(action: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await action()
    return (time.perf_counter() - start) * 1000


@contextlib.asynccontextmanager
async def _test_server(work: str) -> AsyncIterator[tuple[kube.KubeApi, str]]:
    async with KubeTestServer() as server:
        server.create_namespace("bench")
        server.serve_exec(local_exec(cwd=work))
        server.script_pods(name_prefix="sbx-", run_for=None)
        async with await kube.KubeApi.connect(server.cluster_config()) as client:
            yield client, "bench"


@contextlib.asynccontextmanager
async def _real(env: KubeEnv, work: str) -> AsyncIterator[tuple[kube.KubeApi, str]]:
    with env.namespace(f"bench-{uuid.uuid4().hex[:8]}") as namespace:
        await asyncio.to_thread(env.allow_exec, namespace, Path(work))
        async with await kube.KubeApi.connect(env.cluster_config()) as client:
            yield client, namespace


async def _measure(client: kube.KubeApi, namespace: str, runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"open": [], "exec": [], "rtt": [], "file": []}
    payload = b"x" * (1 << 20)
    async with K8sSessions(ProviderSettings(image="runner:bench", namespace=namespace), api=client) as sessions:
        for _ in range(runs):
            start = time.perf_counter()
            sandbox = await sessions.open(OpenOptions(ttl=600))
            times["open"].append((time.perf_counter() - start) * 1000)
            await sandbox.close()
        async with await sessions.open(OpenOptions(ttl=600)) as sandbox:
            await sandbox.commands.run(["true"])
            for _ in range(runs):
                times["exec"].append(await _ms(lambda: client.exec(namespace, sandbox.id, ("true",))))
                times["rtt"].append(await _ms(lambda: sandbox.commands.run(["true"])))

                async def file() -> None:
                    await sandbox.files.write("blob", payload)
                    assert await sandbox.files.read("blob") == payload

                times["file"].append(await _ms(file))
    p50 = {name: statistics.median(values) for name, values in times.items()}
    return {
        "open_p50_ms": p50["open"],
        "exec_p50_ms": p50["exec"],
        "rtt_p50_ms": p50["rtt"],
        "boot_added_ms": p50["rtt"] - p50["exec"],
        "rtt_vs_exec": p50["rtt"] / p50["exec"],
        "file_1mib_ms": p50["file"],
    }


async def main(runs: int) -> None:
    clusters: list[tuple[str, Callable[[str], contextlib.AbstractAsyncContextManager[tuple[kube.KubeApi, str]]]]]
    clusters = [("test-server", _test_server)]
    env: KubeEnv | None = None
    try:
        env = KubeEnv()
        env.start()
        clusters.append(("real-apiserver", lambda work: _real(env, work)))
    except KubeEnvNotAvailable as exc:
        print(f"real kube-apiserver skipped: {exc}")
    try:
        result: dict[str, float] = {}
        for name, opening in clusters:
            with tempfile.TemporaryDirectory() as work:
                async with opening(work) as (client, namespace):
                    result = await _measure(client, namespace, runs)
            print(f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in result.items()) + f" ({runs} runs each)")
        real = int(clusters[-1][0] == "real-apiserver")
        print(f"RESULT real_apiserver={real} " + " ".join(f"{k}={v:.2f}" for k, v in result.items()))
    finally:
        if env is not None:
            env.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per case (default 20)")
    asyncio.run(main(parser.parse_args().runs))
