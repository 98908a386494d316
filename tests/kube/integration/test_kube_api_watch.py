"""Contract: watch from a resourceVersion, typed events, 410 re-list and reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest

from ironflow import errors
from ironflow.kube import api
from ironflow.testing.polling import eventually


async def _collect(events: Any, count: int) -> list[api.WatchEvent]:
    out: list[api.WatchEvent] = []
    async with asyncio.timeout(3.0):
        async for event in events:
            out.append(event)
            if len(out) >= count:
                break
    return out


async def _collect_until_deleted(events: Any) -> list[api.WatchEvent]:
    out: list[api.WatchEvent] = []
    async with asyncio.timeout(5.0):
        async for event in events:
            out.append(event)
            if event.type == "DELETED":
                break
    return out


async def test_watch_from_resource_version_yields_typed_events(kube: Any, make_pod: Any) -> None:
    """Changes after a list's resourceVersion arrive as ADDED, MODIFIED, DELETED, in order."""
    listed = await kube.api.list(api.PODS, kube.namespace)
    await kube.api.create(api.PODS, kube.namespace, make_pod("w1"))
    await kube.api.patch(api.PODS, kube.namespace, "w1", {"metadata": {"labels": {"x": "y"}}})
    await kube.api.delete(api.PODS, kube.namespace, "w1")
    async with contextlib.aclosing(
        kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version)
    ) as events:
        got = await _collect_until_deleted(events)
    # a real scheduler may add its own MODIFIED (PodScheduled=False) between ours
    types = [e.type for e in got]
    assert types[0] == "ADDED"
    assert types[-1] == "DELETED"
    assert set(types[1:-1]) == {"MODIFIED"}
    assert {e.object["metadata"]["name"] for e in got} == {"w1"}
    versions = [int(e.resource_version) for e in got]
    assert versions == sorted(set(versions))


async def test_watch_without_resource_version_starts_with_a_list(kube: Any, make_pod: Any) -> None:
    """A watch with no resourceVersion first yields RELISTED with the current objects."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("existing"))
    async with contextlib.aclosing(kube.api.watch(api.PODS, kube.namespace)) as events:
        first = await _collect(events, 1)
        await kube.api.create(api.PODS, kube.namespace, make_pod("new"))
        later: list[api.WatchEvent] = []
        while not later or later[-1].object["metadata"]["name"] != "new":
            later += await _collect(events, 1)
    assert first[0].type == "RELISTED"
    assert [o["metadata"]["name"] for o in first[0].items] == ["existing"]
    assert later[-1].type == "ADDED"
    # A real scheduler may bind (MODIFIED) the listed pod before the new one arrives.
    assert all(e.type == "MODIFIED" and e.object["metadata"]["name"] == "existing" for e in later[:-1])


async def test_watch_label_selector_reports_objects_leaving_the_selection(kube: Any, make_pod: Any) -> None:
    """An object relabelled out of a watch's selector arrives as DELETED."""
    listed = await kube.api.list(api.PODS, kube.namespace)
    await kube.api.create(api.PODS, kube.namespace, make_pod("sel", labels={"keep": "yes"}))
    await kube.api.patch(api.PODS, kube.namespace, "sel", {"metadata": {"labels": {"keep": "no"}}})
    async with contextlib.aclosing(
        kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version, label_selector="keep=yes")
    ) as events:
        got = await _collect_until_deleted(events)
    types = [e.type for e in got]  # a real scheduler may add a MODIFIED before the relabel
    assert (types[0], types[-1]) == ("ADDED", "DELETED")
    assert set(types[1:-1]) <= {"MODIFIED"}


async def test_watch_from_expired_version_relists(kube: Any, make_pod: Any) -> None:
    """A 410 Gone on a watch makes watch() list again and yield the whole state as RELISTED."""
    server = kube.need_server()
    listed = await kube.api.list(api.PODS, kube.namespace)
    await kube.api.create(api.PODS, kube.namespace, make_pod("after-compaction"))
    server.compact()
    async with contextlib.aclosing(
        kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version)
    ) as events:
        got = await _collect(events, 1)
    assert got[0].type == "RELISTED"
    assert [o["metadata"]["name"] for o in got[0].items] == ["after-compaction"]


async def test_watch_without_relist_raises_gone(kube: Any) -> None:
    """With relist_on_gone=False a 410 surfaces as KubeGone."""
    server = kube.need_server()
    listed = await kube.api.list(api.PODS, kube.namespace)
    await kube.api.create(
        api.CONFIGMAPS, kube.namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump"}}
    )
    server.compact()
    with pytest.raises(errors.KubeGone):
        async with contextlib.aclosing(
            kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version, relist_on_gone=False)
        ) as events:
            await _collect(events, 1)


async def test_watch_reconnects_after_the_connection_drops(kube: Any, make_pod: Any) -> None:
    """When the server ends a watch, watch() reconnects from the last resourceVersion and misses nothing."""
    server = kube.need_server()
    listed = await kube.api.list(api.PODS, kube.namespace)
    async with contextlib.aclosing(
        kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version)
    ) as events:
        await kube.api.create(api.PODS, kube.namespace, make_pod("before-drop"))
        first = await _collect(events, 1)
        assert server.drop_watches() == 1
        await kube.api.create(api.PODS, kube.namespace, make_pod("after-drop"))
        second = await _collect(events, 1)
    assert first[0].object["metadata"]["name"] == "before-drop"
    assert second[0].object["metadata"]["name"] == "after-drop"
    assert kube.api.counters.watches_opened == 2


async def test_watch_retries_failed_connections_with_backoff(kube: Any, make_pod: Any) -> None:
    """Two 503s on watch are retried; the events still arrive."""
    server = kube.need_server()
    listed = await kube.api.list(api.PODS, kube.namespace)
    rule = server.fail("watch", "pods", nth=1, times=2, status=503)
    await kube.api.create(api.PODS, kube.namespace, make_pod("after-retry"))
    async with contextlib.aclosing(
        kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version)
    ) as events:
        got = await _collect(events, 1)
    assert rule.fired == 2
    assert got[0].object["metadata"]["name"] == "after-retry"


async def test_watch_gives_up_after_max_retries(kube: Any) -> None:
    """A watch that keeps failing raises KubeUnavailable after max_retries attempts."""
    server = kube.need_server()
    server.fail("watch", "pods", nth=1, times=10, status=500)
    with pytest.raises(errors.KubeUnavailable):
        async with contextlib.aclosing(
            kube.api.watch(api.PODS, kube.namespace, resource_version="1", max_retries=1)
        ) as events:
            await _collect(events, 1)


async def test_open_watch_connections_are_counted(kube: Any) -> None:
    """counters.open_watches rises while a watch is open and falls when it is closed."""
    listed = await kube.api.list(api.PODS, kube.namespace)
    events = kube.api.watch_stream(api.PODS, kube.namespace, resource_version=listed.resource_version)
    task = asyncio.create_task(anext(events))
    await eventually(lambda: kube.api.counters.open_watches == 1, what="the watch to open")
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await events.aclose()
    assert kube.api.counters.open_watches == 0


async def test_watch_retries_a_failing_initial_list(kube: Any, make_pod: Any) -> None:
    """A 503 on the list that starts a watch is retried like a failed connection."""
    server = kube.need_server()
    await kube.api.create(api.PODS, kube.namespace, make_pod("listed"))
    rule = server.fail("list", "pods", status=503)
    async with contextlib.aclosing(kube.api.watch(api.PODS, kube.namespace)) as events:
        got = await _collect(events, 1)
    assert rule.fired == 1
    assert got[0].type == "RELISTED"
    assert [o["metadata"]["name"] for o in got[0].items] == ["listed"]


async def test_watch_closed_early_releases_its_connection(kube: Any, make_pod: Any) -> None:
    """Leaving a watch (aclosing) closes its connection on both sides."""
    server = kube.need_server()
    await kube.api.create(api.PODS, kube.namespace, make_pod("one"))
    async with contextlib.aclosing(kube.api.watch(api.PODS, kube.namespace, resource_version="1")) as events:
        await _collect(events, 1)
        assert kube.api.counters.open_watches == 1
    assert kube.api.counters.open_watches == 0
    await eventually(lambda: server.open_watches == 0, what="the server to close its side of the watch")


async def test_watch_replay_rebuilds_the_listed_state(kube: Any, make_pod: Any) -> None:
    """After a random sequence of writes, replaying the watch from the start rebuilds exactly
    what a list shows now (names, labels and resourceVersions)."""
    rng = random.Random(20261129)
    # only ours (label "step"): a real namespace also holds kube-root-ca.crt
    start = await kube.api.list(api.CONFIGMAPS, kube.namespace, label_selector="step")
    alive: set[str] = set()
    writes = 0
    for step in range(60):
        name = f"cm-{rng.randrange(8)}"
        if name in alive and rng.random() < 0.4:
            await kube.api.delete(api.CONFIGMAPS, kube.namespace, name)
            alive.discard(name)
        elif name in alive:
            await kube.api.patch(api.CONFIGMAPS, kube.namespace, name, {"metadata": {"labels": {"step": str(step)}}})
        else:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"step": str(step)}}}
            await kube.api.create(api.CONFIGMAPS, kube.namespace, body)
            alive.add(name)
        writes += 1
    rebuilt: dict[str, dict[str, Any]] = {}
    async with contextlib.aclosing(
        kube.api.watch(api.CONFIGMAPS, kube.namespace, resource_version=start.resource_version, label_selector="step")
    ) as events:
        for event in await _collect(events, writes):
            if event.type == "DELETED":
                del rebuilt[event.object["metadata"]["name"]]
            else:
                rebuilt[event.object["metadata"]["name"]] = event.object
    listed = await kube.api.list(api.CONFIGMAPS, kube.namespace, label_selector="step")

    def summary(objs: Any) -> list[tuple[str, str, str]]:
        return sorted(
            (o["metadata"]["name"], o["metadata"]["labels"]["step"], o["metadata"]["resourceVersion"]) for o in objs
        )

    assert summary(rebuilt.values()) == summary(listed.items)
    assert set(rebuilt) == alive


async def test_bookmarks_keep_a_quiet_watch_from_relisting(kube: Any, make_pod: Any) -> None:
    """A bookmark moves a quiet watch's resourceVersion on, so after a compaction and a
    reconnect it resumes without a 410 and without a list."""
    server = kube.need_server()
    listed = await kube.api.list(api.PODS, kube.namespace)
    async with contextlib.aclosing(
        kube.api.watch(api.PODS, kube.namespace, resource_version=listed.resource_version)
    ) as events:
        task = asyncio.create_task(_collect(events, 1))
        await eventually(lambda: server.open_watches, what="the watch to open")
        await kube.api.create(  # another kind moves the global resourceVersion; this watch hears nothing
            api.CONFIGMAPS, kube.namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump"}}
        )
        assert server.send_bookmarks() == 1
        await asyncio.sleep(0.1)  # the bookmark arrives (and is not yielded)
        server.compact()
        server.drop_watches()
        await kube.api.create(api.PODS, kube.namespace, make_pod("after-bookmark"))
        got = await task
    assert got[0].type == "ADDED"
    assert got[0].object["metadata"]["name"] == "after-bookmark"
    assert server.count("list", "pods") == 1  # only the test's own list: no re-list
