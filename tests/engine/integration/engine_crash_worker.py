"""A worker process for the crash tests.

    python engine_crash_worker.py STORE LOG SLOW_DELAY_S            # recording provider
    python engine_crash_worker.py STORE --kubeconfig FILE NAMESPACE [RUN_FOR]  # Kubernetes provider

The recording provider logs to LOG and spends SLOW_DELAY_S in the step named ``slow``;
the Kubernetes provider runs real pods on the cluster the kubeconfig names, each labelled to
run for RUN_FOR (a Go duration kwok reads), when given, unless its step says otherwise. The lease is
short so a killed worker's run is taken again quickly.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from ironflow.engine.runner import Runner
from ironflow.engine.store import open_store
from ironflow.engine.worker import Worker


def _provider(args: list[str]) -> Any:
    if args[0] == "--kubeconfig":
        from ironflow.k8s.pod_provider import K8sEphemeralProvider
        from ironflow.kube import api
        from ironflow.testing.kubeenv import RUN_FOR_LABEL

        provider = (
            K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
            .namespace(args[2])
            .cluster(api.KubeconfigInline(Path(args[1]).read_text()))
            .timeout(60)
        )
        return provider.pod_label(RUN_FOR_LABEL, args[3]) if len(args) > 3 else provider
    from ironflow.testing.engine import RecordingProvider

    return RecordingProvider(log_path=args[0], step_delays={"slow": float(args[1])})


async def main(store_url: str, args: list[str]) -> None:
    store = open_store(store_url)
    await store.open()
    provider = _provider(args)
    try:
        await Worker(store, lambda run: Runner(store, provider), lease_s=1.5, poll_s=0.05).run()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
