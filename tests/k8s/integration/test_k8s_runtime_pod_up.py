"""``PodUp`` and ``PodRun`` stdin on a cluster: the objects as the API server stores them.

On every ``kube`` backend (the real kube-apiserver included): a service pod is created hardened
and labelled to its run, ``start()`` returns once it is Ready with its address, ``release_run``'s
selection deletes it (the reaper once its lifetime is past), and one that ends or never gets Ready
is deleted before the error. On the
test server (its pods/exec): a ``PodRun``'s stdin goes over the exec stream, never into the
stored pod, and the result carries the exit code with its end reason. The two rendered shells
also run here against one FIFO.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from tests.fakes.kubecase import KubeCase, names, nothing_left

from ironflow import errors, labels
from ironflow.k8s import cleanup, reaper
from ironflow.k8s.commands import specs
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.commands.pod_ups import PodUp, Readiness
from ironflow.kube import api as k8s
from ironflow.testing.kube import KubeTestServer, PodScript
from ironflow.testing.polling import eventually

SECRET = b"sk-ant-api03-not-a-real-one\n"


def db(ns: str) -> PodUp:
    return PodUp("db", "postgres:16", "run-1").namespace(ns).port(5432).readiness(Readiness.tcp(5432))


async def _exists(kube: KubeCase, name: str) -> None:
    async def there() -> bool:
        return name in await names(kube, k8s.PODS)

    await eventually(there, limit_s=10, interval_s=0.02, what=f"pod {name} created")


async def test_a_service_pod_is_ready_labelled_to_its_run_and_released_with_it(kube: KubeCase) -> None:
    await kube.control.script_pods(PodScript(name_prefix="db", run_for=None))
    service = await db(kube.namespace).start(kube.api)
    assert (service.name, service.ports) == ("db", (5432,))
    assert service.address() == f"{service.ip}:5432"
    assert service.ip
    stored = await kube.api.get(k8s.PODS, kube.namespace, "db")
    assert stored["metadata"]["labels"][labels.LABEL_RUN_ID] == "run-1"
    assert stored["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert await cleanup.delete_and_wait(kube.api, kube.namespace, cleanup.run_selection("run-2"), 10) == 0
    assert await cleanup.delete_and_wait(kube.api, kube.namespace, cleanup.run_selection("run-1"), 10) == 1
    await nothing_left(kube, k8s.PODS)


async def test_the_reaper_deletes_a_service_pod_past_its_lifetime_and_not_before(kube: KubeCase) -> None:
    """A worker that died leaves its service pod to the reaper, which reads the expiry ``lifetime`` set."""
    await kube.control.script_pods(PodScript(name_prefix="db", run_for=None))
    await db(kube.namespace).lifetime(600).start(kube.api)
    stored = await kube.api.get(k8s.PODS, kube.namespace, "db")
    expires = int(stored["metadata"]["annotations"][labels.ANNOTATION_EXPIRES_AT])
    assert (await reaper.reap_namespace(kube.api, kube.namespace, now=expires)).pods_deleted == 0
    assert (await reaper.reap_namespace(kube.api, kube.namespace, now=expires + 1)).pods == ("db",)
    await nothing_left(kube, k8s.PODS)


async def test_a_service_pod_that_ends_before_ready_fails_and_is_deleted(kube: KubeCase) -> None:
    starting = asyncio.ensure_future(db(kube.namespace).start(kube.api))
    await _exists(kube, "db")
    await kube.control.set_pod_phase(kube.namespace, "db", "Failed", exit_code=3)
    with pytest.raises(errors.SandboxFailed, match=r"EndedBeforeReady.*exit code 3"):
        await starting
    await nothing_left(kube, k8s.PODS)


async def test_a_service_pod_not_ready_in_time_is_deleted(kube: KubeCase) -> None:
    with pytest.raises(errors.OperationTimeout, match=r"service pod 'db' was not Ready within 0\.3s"):
        await db(kube.namespace).start_timeout(0.3).start(kube.api)
    await nothing_left(kube, k8s.PODS)


async def test_a_cancelled_start_deletes_the_service_pod(kube: KubeCase) -> None:
    starting = asyncio.ensure_future(db(kube.namespace).start(kube.api))
    await _exists(kube, "db")
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    await nothing_left(kube, k8s.PODS)


async def test_stdin_goes_over_the_exec_stream_and_never_into_the_pod(kube: KubeCase, server: KubeTestServer) -> None:
    """The stand-in container reads the bytes as the FIFO's writer does (``head -c N``)."""

    async def writer(pod: dict[str, object], container: str, command: list[str]) -> asyncio.subprocess.Process:
        size = str(len(SECRET))
        return await asyncio.create_subprocess_exec(
            "head", "-c", size, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )

    server.serve_exec(writer)
    await kube.control.script_pods(PodScript(name_prefix="feed", run_for=None))
    run = PodRun("feed", "runner:1", "cat").namespace(kube.namespace).stdin(SECRET).timeout(20)
    running = asyncio.ensure_future(run.run(kube.api))

    async def fed() -> bool:
        return bool(server.execs) and server.execs[0].exit_code is not None

    await eventually(fed, limit_s=10, interval_s=0.02, what="the stdin exec")
    stored = await kube.api.get(k8s.PODS, kube.namespace, "feed")
    assert b"sk-ant" not in json.dumps(stored).encode()
    await kube.control.set_pod_phase(kube.namespace, "feed", "Failed", exit_code=4)
    out = await running
    (record,) = server.execs
    assert record.command == list(specs.stdin_writer(len(SECRET)))
    assert bytes(record.stdin) == SECRET
    assert (out.success, out.exit_code, out.reason) == (False, 4, "Error")
    await nothing_left(kube, k8s.PODS)


@pytest.mark.skipif(not Path("/usr/bin/mkfifo").exists(), reason="needs mkfifo")
def test_the_rendered_shells_hand_the_bytes_over_and_end_with_eof(tmp_path: Path) -> None:
    """The container's shell and the writer's, run here against one FIFO: the command reads
    exactly the bytes, then EOF; its exit code is its own."""
    pod = PodRun("feed", "i", "cat > out; exit 3").stdin(b"x").build_pod(now=0)
    fifo = str(tmp_path / "in")
    reader_argv = [a.replace(specs.STDIN_FIFO, fifo) for a in pod["spec"]["containers"][0]["command"]]
    writer_argv = [a.replace(specs.STDIN_FIFO, fifo) for a in specs.stdin_writer(len(SECRET))]
    reader = subprocess.Popen(reader_argv, cwd=tmp_path)
    writer = subprocess.run(writer_argv, input=SECRET + b"beyond", cwd=tmp_path, timeout=20, check=False)
    assert writer.returncode == 0
    assert reader.wait(timeout=20) == 3
    assert (tmp_path / "out").read_bytes() == SECRET
