"""Contract: pod logs, whole and followed."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from ironflow import errors
from ironflow.kube import api
from ironflow.testing.kube import KubeTestServer
from ironflow.testing.polling import eventually


async def _running_pod(kube: Any, make_pod: Any, name: str, **kwargs: Any) -> None:
    await kube.api.create(api.PODS, kube.namespace, make_pod(name, **kwargs))
    await kube.control.set_pod_phase(kube.namespace, name, "Running")


async def test_read_log_returns_the_whole_log(kube: Any, make_pod: Any) -> None:
    """read_log returns stdout and stderr as the kubelet merged them."""
    await _running_pod(kube, make_pod, "logs")
    await kube.control.set_log(kube.namespace, "logs", '{"type":"result"}\nsecond line\n')
    assert await kube.api.read_log(kube.namespace, "logs") == '{"type":"result"}\nsecond line\n'


async def test_read_log_tail_lines(kube: Any, make_pod: Any) -> None:
    """tail_lines keeps the last lines only."""
    await _running_pod(kube, make_pod, "tail")
    await kube.control.set_log(kube.namespace, "tail", "1\n2\n3\n")
    assert await kube.api.read_log(kube.namespace, "tail", tail_lines=2) == "2\n3\n"


async def test_log_of_unscheduled_pod_is_empty(kube: Any, make_pod: Any) -> None:
    """A pod on no node yet has no kubelet to ask: a real API server answers an empty log (200)."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("waiting"))
    assert await kube.api.read_log(kube.namespace, "waiting") == ""


async def test_log_of_scheduled_pod_not_started_is_bad_request(make_pod: Any) -> None:
    """On a node but not started: the kubelet refuses with 400 ("waiting to start")."""
    async with KubeTestServer() as server:
        server.create_namespace("sched")
        body = make_pod("waiting")
        body["spec"]["nodeName"] = "node-1"
        async with await api.KubeApi.connect(server.cluster_config()) as kube_api:
            await kube_api.create(api.PODS, "sched", body)
            with pytest.raises(errors.KubernetesError) as caught:
                await kube_api.read_log("sched", "waiting")
    assert caught.value.status == 400
    assert "waiting to start" in str(caught.value)


async def test_log_of_missing_pod_is_not_found(kube: Any) -> None:
    """Reading the log of a pod that does not exist is KubeNotFound."""
    with pytest.raises(errors.KubeNotFound):
        await kube.api.read_log(kube.namespace, "nobody")


async def test_multi_container_log_needs_a_container_name(kube: Any, make_pod: Any) -> None:
    """A pod with two containers needs container= to read a log."""
    await _running_pod(kube, make_pod, "two", containers=("main", "side"))
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.read_log(kube.namespace, "two")
    assert caught.value.status == 400
    assert await kube.api.read_log(kube.namespace, "two", "side") == ""


async def test_follow_log_streams_lines_until_the_pod_ends(kube: Any, make_pod: Any) -> None:
    """follow_log yields lines as they are written and ends when the pod finishes."""
    await _running_pod(kube, make_pod, "follow")
    await kube.control.set_log(kube.namespace, "follow", "first\n")
    seen: list[str] = []

    async def follow() -> None:
        async for line in kube.api.follow_log(kube.namespace, "follow"):
            seen.append(line)

    task = asyncio.create_task(follow())
    await eventually(lambda: seen, what="the first line")
    assert seen == ["first"]
    await kube.control.append_log(kube.namespace, "follow", "second\nthird\n")
    await eventually(lambda: len(seen) >= 3, what="the appended lines")
    assert seen == ["first", "second", "third"]
    await kube.control.set_pod_phase(kube.namespace, "follow", "Succeeded")
    if kube.server is None:  # kwok keeps following after the pod ends (its CRI stub has no status)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return
    async with asyncio.timeout(3):
        await task
    assert kube.api.counters.open_streams == 0


async def test_follow_log_handles_lines_longer_than_the_read_buffer(kube: Any, make_pod: Any) -> None:
    """A 300 KiB stream-json line arrives whole."""
    await _running_pod(kube, make_pod, "long")
    long_line = "x" * (300 * 1024)
    await kube.control.set_log(kube.namespace, "long", long_line + "\nend\n")
    await kube.control.set_pod_phase(kube.namespace, "long", "Succeeded")
    lines: list[str] = []
    async with contextlib.aclosing(kube.api.follow_log(kube.namespace, "long")) as stream:
        async for line in stream:  # stop at "end": kwok, unlike a kubelet, keeps following
            lines.append(line)
            if line == "end":
                break
    assert lines == [long_line, "end"]
