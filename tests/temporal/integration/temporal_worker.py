"""A Temporal worker process for the crash tests, on the local sandbox or on Kubernetes.

    python temporal_worker.py ADDRESS TASK_QUEUE EVENTS local MODEL_URL TEMP_DIR
    python temporal_worker.py ADDRESS TASK_QUEUE EVENTS k8s KUBECONFIG NAMESPACE RUN_FOR

The local sandbox talks to the tests' offline model at MODEL_URL; the Kubernetes provider runs
pods on the cluster the kubeconfig names (the real kube-apiserver with kwok), each labelled to
run for RUN_FOR (a Go duration kwok reads) unless its step says otherwise.

Runs the workflows of ``temporal_workflows.py`` and the ironflow activities until killed;
prints ``ready`` once it polls. Each release it makes is a JSON line in EVENTS (pid, kind,
step, sandboxes removed).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.provider import AgentProvider
from ironflow.secrets import Secret
from ironflow.steps import StepScope
from ironflow.temporal import IronflowActivities, build_worker, load_workflows
from ironflow.temporal.worker import connect

KEY = "sk-ant-api03-temporal-crash-test-key-abcdef"
WORKFLOWS = Path(__file__).parent / "temporal_workflows.py"


def _provider(backend: str, first: str, second: str, run_for: str | None) -> AgentProvider:
    if backend == "k8s":
        from ironflow.k8s.pod_provider import K8sEphemeralProvider
        from ironflow.kube import api
        from ironflow.testing.kubeenv import RUN_FOR_LABEL

        provider = (
            K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:2.1.332-1")
            .namespace(second)
            .cluster(api.KubeconfigInline(Path(first).read_text()))
            .timeout(60)
        )
        return provider.pod_label(RUN_FOR_LABEL, run_for) if run_for else provider
    return LocalSandboxProvider(
        timeout=60,
        credential=ProxyCredential(Secret(KEY), "api_key", first),
        env={"CLAUDE_CODE_MAX_RETRIES": "0"},
        temp_dir=second,
    )


async def main(
    address: str, queue: str, events: str, backend: str, first: str, second: str, run_for: str | None = None
) -> None:
    def on_release(kind: str, scope: StepScope | None, removed: int) -> None:
        line = {"pid": os.getpid(), "kind": kind, "step": scope.step if scope else None, "removed": removed}
        with open(events, "a") as out:
            out.write(json.dumps(line) + "\n")

    provider = _provider(backend, first, second, run_for)
    client = await connect(address)
    worker = build_worker(
        client,
        task_queue=queue,
        provider=provider,
        workflows=load_workflows(str(WORKFLOWS)),
        activities=IronflowActivities(provider, on_release=on_release),
    )
    async with provider, worker:
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
