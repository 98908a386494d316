"""Fail fast on the real kubelet's word: on the real node (kubelet, containerd, runc), an agent
step whose image is not on the node (pull policy ``Never``), whose Secret does not exist, whose
container outgrows its memory limit or whose pod outlives ``activeDeadlineSeconds`` ends at once
with the reason the kubelet wrote, and leaves no pod; a ``PodRun`` ends so too (``OOMKilled``
under gVisor as well).

``test_realkube_fail_fast.py`` shows the same with kwok writing the status; here nothing is
scripted: the image, the Secret, the cgroup's OOM killer and the kubelet's deadline are real.
A step runs the agent's command line ``<claude_path> -p <prompt> …``; with ``claude_path`` ``sh``
and the prompt a script mounted from a ConfigMap, the step's own pod runs that script in place
of the CLI (the runner image and the pod are the product's, unchanged). The step's timeout is
300 s; each test asserts it ended well before (bounds are generous: the node is shared).
Skipped when the node's binaries or the runner image are missing.
"""

from __future__ import annotations

import time

import pytest

from ironflow import errors
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.commands.specs import ResourceSpec
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import K8sResources
from ironflow.k8s.step_runs import StepRunner
from ironflow.kube import api as k8s
from ironflow.steps import AgentConfig
from ironflow.testing.polling import eventually

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(480)

STEP_TIMEOUT_S = 300
#: Well under the timeout, well over what the node takes when loaded (create to status: 2-20 s).
ENDS_WITHIN_S = 120
SCRIPTS = "/etc/ironflow-test"
#: Allocates and touches 16 MiB at a time until the cgroup's OOM killer ends it.
GREEDY = "exec node -e 'const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1))'\n"
SMALL = K8sResources(
    cpu_request="50m", memory_request="64Mi", ephemeral_storage_request=None, ephemeral_storage_limit=None
)


def provider(ns: str, image: str) -> K8sEphemeralProvider:
    return (
        K8sEphemeralProvider.sandboxed(image)
        .namespace(ns)
        .image_pull_policy("Never")  # no registry: only what is on the node
        .timeout(STEP_TIMEOUT_S)
        .resources(SMALL)
    )


async def scripted(api: k8s.KubeApi, ns: str, p: K8sEphemeralProvider, script: str) -> K8sEphemeralProvider:
    """``p`` running ``script`` (``sh -p <script>``) in place of the agent CLI."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripts"}, "data": {"step.sh": script}}
    await api.create(k8s.CONFIGMAPS, ns, body)
    return p.read_only_config_map("scripts", SCRIPTS).claude_path("sh")


async def fails(api: k8s.KubeApi, p: K8sEphemeralProvider, prompt: str = "hi") -> tuple[errors.IronflowError, float]:
    """Run one step; return the error it ended with and how long it took."""
    started = time.monotonic()
    with pytest.raises(errors.IronflowError) as caught:
        await StepRunner.of(p.settings, api=api, worker_env={}).run(AgentConfig(prompt))
    return caught.value, time.monotonic() - started


async def no_pod_left(api: k8s.KubeApi, ns: str) -> None:
    left: list[str] = []

    async def gone() -> bool:
        left[:] = [p["metadata"]["name"] for p in (await api.list(k8s.PODS, ns)).items]
        return not left

    await eventually(gone, limit_s=60, interval_s=0.2, what=lambda: f"no pod in {ns}; left: {left}")


async def test_an_image_not_on_the_node_ends_the_step_with_err_image_never_pull(
    node_ns: str, node_api: k8s.KubeApi
) -> None:
    p = provider(node_ns, "docker.io/library/ironflow-never-built:0")
    exc, took = await fails(node_api, p)
    assert took < ENDS_WITHIN_S, f"the step took {took:.0f}s: it waited for its timeout"
    assert isinstance(exc, errors.SandboxRefused), exc
    assert not exc.retryable
    assert exc.reason == "ErrImageNeverPull"
    assert exc.message.startswith("pod claude-code-")
    assert "ironflow-never-built:0" in exc.message
    assert "is not present with pull policy of Never" in exc.message
    await no_pod_left(node_api, node_ns)


async def test_a_missing_secret_ends_the_step_with_create_container_config_error(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    p = provider(node_ns, need_image["runner"]).env_from_secret("TOKEN", "no-such-secret", "token")
    exc, took = await fails(node_api, p)
    assert took < ENDS_WITHIN_S, f"the step took {took:.0f}s: it waited for its timeout"
    assert isinstance(exc, errors.SandboxRefused), exc
    assert exc.reason == "CreateContainerConfigError"
    assert 'secret "no-such-secret" not found' in exc.message
    await no_pod_left(node_api, node_ns)


async def test_a_container_past_its_memory_limit_ends_the_step_oom_killed(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    p = provider(node_ns, need_image["runner"]).resources(
        K8sResources(
            cpu_request="50m",
            memory_request="96Mi",
            memory_limit="96Mi",
            ephemeral_storage_request=None,
            ephemeral_storage_limit=None,
        )
    )
    p = await scripted(node_api, node_ns, p, GREEDY)
    exc, took = await fails(node_api, p, f"{SCRIPTS}/step.sh")
    assert took < ENDS_WITHIN_S, f"the step took {took:.0f}s: it waited for its timeout"
    assert isinstance(exc, errors.SandboxFailed), exc
    assert exc.retryable
    assert exc.reason == "OOMKilled"
    assert exc.message.startswith("pod claude-code-")
    await no_pod_left(node_api, node_ns)


async def test_a_pod_past_its_active_deadline_ends_the_step_deadline_exceeded(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    p = provider(node_ns, need_image["runner"]).active_deadline_seconds(5)
    p = await scripted(node_api, node_ns, p, "exec sleep 600\n")
    exc, took = await fails(node_api, p, f"{SCRIPTS}/step.sh")
    assert took < ENDS_WITHIN_S, f"the step took {took:.0f}s: it waited for its timeout"
    assert isinstance(exc, errors.SandboxFailed), exc
    assert exc.reason == "DeadlineExceeded"
    await no_pod_left(node_api, node_ns)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_pod_run_past_its_memory_limit_ends_oom_killed(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    run = (
        PodRun("greedy", need_image["runner"], GREEDY)
        .namespace(node_ns)
        .restricted(read_only_root=True)
        .resources(ResourceSpec(memory_request="96Mi", memory_limit="96Mi"))
        .timeout(STEP_TIMEOUT_S)
    )
    if runtime == "gvisor":
        run = run.runtime_class("gvisor")
    started = time.monotonic()
    with pytest.raises(errors.SandboxFailed) as caught:
        await run.run(node_api)
    assert time.monotonic() - started < ENDS_WITHIN_S, "the run waited for its timeout"
    assert caught.value.reason == "OOMKilled"
    await no_pod_left(node_api, node_ns)


async def test_a_pod_run_past_its_active_deadline_ends_deadline_exceeded(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str]
) -> None:
    run = (
        PodRun("sleeper", need_image["runner"], "exec sleep 600")
        .namespace(node_ns)
        .restricted(read_only_root=True)
        .active_deadline_seconds(5)
        .timeout(STEP_TIMEOUT_S)
    )
    started = time.monotonic()
    with pytest.raises(errors.SandboxFailed) as caught:
        await run.run(node_api)
    assert time.monotonic() - started < ENDS_WITHIN_S, "the run waited for its timeout"
    assert caught.value.reason == "DeadlineExceeded"
    await no_pod_left(node_api, node_ns)
