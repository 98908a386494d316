"""Contract: one shared pod watch per namespace serves every waiter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ironflow import errors
from ironflow.kube import api, informer, pod_status
from ironflow.testing.polling import eventually

#: How long a waiter may wait: a bound for a loaded machine, not how long anything takes.
WAIT_LIMIT_S = 30


async def test_many_waiters_share_one_watch_connection(kube: Any, make_pod: Any) -> None:
    """Fifty steps waiting in one namespace open exactly one watch and one list."""
    server = kube.need_server()
    pods = informer.informer_for(kube.api, kube.namespace)
    names = [f"many-{i}" for i in range(50)]
    for name in names:
        await kube.api.create(api.PODS, kube.namespace, make_pod(name))
    server.reset_requests()
    async with pods.hold():  # every waiter joins the one watch, open and listed (not "after 50 ms")
        await pods.wait_synced()
        waits = [asyncio.create_task(pods.wait_for(n, pod_status.pod_finished, WAIT_LIMIT_S)) for n in names]
        await eventually(lambda: pods.users == 1 + len(names), what=lambda: f"50 waiters; {pods.users - 1} joined")
        for name in names:
            await kube.control.set_pod_phase(kube.namespace, name, "Succeeded")
        results = await asyncio.gather(*waits)
    assert [r["metadata"]["name"] for r in results if r] == names
    assert server.count("watch", "pods") == 1
    assert server.count("list", "pods") == 1
    assert server.max_open_watches == 1
    assert not pods.running
    assert server.open_watches == 0 or await eventually(lambda: server.open_watches == 0)


async def test_informer_for_returns_one_instance_per_namespace(kube: Any) -> None:
    """The registry hands the same informer to every caller of a (client, resource, namespace)."""
    first = informer.informer_for(kube.api, kube.namespace)
    assert informer.informer_for(kube.api, kube.namespace) is first
    assert isinstance(first, informer.PodInformer)
    assert informer.informer_for(kube.api, "default") is not first
    assert informer.informer_for(kube.api, kube.namespace, api.JOBS) is not first


async def test_wait_for_returns_none_on_timeout(kube: Any, make_pod: Any) -> None:
    """A predicate that never holds gives None after the timeout."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("stuck"))
    pods = informer.informer_for(kube.api, kube.namespace)
    assert await pods.wait_for("stuck", pod_status.pod_finished, 0.2) is None
    assert not pods.running


async def test_wait_for_sees_an_object_already_in_the_state(kube: Any, make_pod: Any) -> None:
    """A pod that finished before the wait began is returned at once from the first list."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("early"))
    await kube.control.set_pod_phase(kube.namespace, "early", "Succeeded")
    pods = informer.informer_for(kube.api, kube.namespace)
    pod = await pods.wait_for("early", pod_status.pod_finished, 2)
    assert pod is not None
    assert pod["status"]["phase"] == "Succeeded"


async def test_wait_for_a_deleted_object_raises_not_found(kube: Any, make_pod: Any) -> None:
    """Deleting the pod a step waits on wakes the step with KubeNotFound."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("vanishing"))
    pods = informer.informer_for(kube.api, kube.namespace)
    async with pods.hold():
        # The delete must come after the informer has the pod: deleted before its first list,
        # the pod is simply absent and the waiter times out (what a 50 ms sleep let happen).
        await pods.wait_synced()
        await eventually(lambda: pods.get("vanishing") is not None, what="the informer to cache the pod")
        wait = asyncio.create_task(pods.wait_for("vanishing", pod_status.pod_finished, WAIT_LIMIT_S))
        await eventually(lambda: pods.users == 2, what="the waiter to join the informer")
        await kube.api.delete(api.PODS, kube.namespace, "vanishing")
        with pytest.raises(errors.KubeNotFound):
            await wait


async def test_wait_deleted_by_uid(kube: Any, make_pod: Any) -> None:
    """wait_deleted is True once the pod with that uid is gone, even if the name is reused."""
    created = await kube.api.create(api.PODS, kube.namespace, make_pod("reused"))
    pods = informer.informer_for(kube.api, kube.namespace)
    async with pods.hold():
        assert not await pods.wait_deleted("reused", created["metadata"]["uid"], 0.1)
        wait = asyncio.create_task(pods.wait_deleted("reused", created["metadata"]["uid"], 5))
        await kube.api.delete(api.PODS, kube.namespace, "reused", grace_period_seconds=0)
        await kube.api.create(api.PODS, kube.namespace, make_pod("reused"))
        assert await wait
    assert await pods.wait_deleted("never-existed", timeout=1)


async def test_informer_relists_after_gone_and_keeps_serving(kube: Any, make_pod: Any) -> None:
    """After a compaction and a dropped watch the informer re-lists, and waiters still wake."""
    server = kube.need_server()
    pods = informer.informer_for(kube.api, kube.namespace)
    await kube.api.create(api.PODS, kube.namespace, make_pod("relist"))
    async with pods.hold():
        await pods.wait_synced()
        assert pods.relists == 1
        wait = asyncio.create_task(pods.wait_for("relist", pod_status.pod_finished, 5))
        await asyncio.sleep(0.05)
        server.fail("watch", "pods", status=503)  # the reconnect waits out a backoff...
        server.drop_watches()
        await kube.api.create(api.PODS, kube.namespace, make_pod("other"))
        server.compact()  # ...while the history it needs is compacted away: 410, re-list
        await asyncio.sleep(0.5)
        await kube.control.set_pod_phase(kube.namespace, "relist", "Succeeded")
        pod = await wait
    assert pod is not None
    assert pods.relists == 2
    assert pods.get("relist") is None or not pods.running


async def test_informer_surfaces_a_dead_watch_to_waiters(kube: Any, make_pod: Any) -> None:
    """When the watch fails for good, every waiter gets the API error instead of hanging."""
    server = kube.need_server()
    await kube.api.create(api.PODS, kube.namespace, make_pod("doomed"))
    server.deny("pods", "list")
    pods = informer.informer_for(kube.api, kube.namespace)
    with pytest.raises(errors.KubeForbidden):
        await pods.wait_for("doomed", pod_status.pod_finished, 5)
    server.allow("pods", "list")
    await kube.control.set_pod_phase(kube.namespace, "doomed", "Failed")
    pod = await pods.wait_for("doomed", pod_status.pod_finished, 5)
    assert pod is not None


async def test_hold_keeps_one_watch_across_sequential_waits(kube: Any, make_pod: Any) -> None:
    """Inside hold(), back-to-back waits reuse the open watch (no new list or watch)."""
    server = kube.need_server()
    pods = informer.informer_for(kube.api, kube.namespace)
    async with pods.hold():
        for i in range(3):
            await kube.api.create(api.PODS, kube.namespace, make_pod(f"seq-{i}"))
            await kube.control.set_pod_phase(kube.namespace, f"seq-{i}", "Succeeded")
            assert await pods.wait_for(f"seq-{i}", pod_status.pod_finished, 2) is not None
        assert pods.users == 1
    assert server.count("watch", "pods") == 1
    assert not pods.running


async def test_generic_informer_waits_for_custom_state(kube: Any) -> None:
    """An informer over ConfigMaps (any resource) waits on any predicate."""
    configmaps = informer.informer_for(kube.api, kube.namespace, api.CONFIGMAPS)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flag"}, "data": {"ready": "no"}}
    await kube.api.create(api.CONFIGMAPS, kube.namespace, body)
    wait = asyncio.create_task(configmaps.wait_for("flag", lambda o: o.get("data", {}).get("ready") == "yes", 3))
    await asyncio.sleep(0.05)
    await kube.api.patch(api.CONFIGMAPS, kube.namespace, "flag", {"data": {"ready": "yes"}})
    found = await wait
    assert found is not None
    assert found["data"]["ready"] == "yes"


async def test_linger_keeps_the_watch_between_users_then_stops(kube: Any, make_pod: Any) -> None:
    """With linger_s, a second wait right after the first reuses the watch; later it stops."""
    server = kube.need_server()
    pods = informer.Informer(kube.api, api.PODS, kube.namespace, linger_s=0.3)
    for name in ("l1", "l2"):
        await kube.api.create(api.PODS, kube.namespace, make_pod(name))
        await kube.control.set_pod_phase(kube.namespace, name, "Succeeded")
        assert await pods.wait_for(name, pod_status.pod_finished, 2) is not None
    assert server.count("watch", "pods") == 1
    assert pods.running
    assert await eventually(lambda: not pods.running)
    assert await eventually(lambda: server.open_watches == 0)


async def test_wait_deleted_does_not_trust_a_lagging_cache(kube: Any, make_pod: Any) -> None:
    """A pod the API shows but the cache has not seen yet is not reported gone: the informer asks
    the API once, then waits for the DELETED event."""
    server = kube.need_server()
    pods = informer.informer_for(kube.api, kube.namespace)
    async with pods.hold():
        await pods.wait_synced()
        server.fail("watch", "pods", status=503, times=3)  # the watch is down for a while...
        server.drop_watches()
        created = await kube.api.create(api.PODS, kube.namespace, make_pod("lagging"))  # ...and misses this
        uid = created["metadata"]["uid"]
        assert pods.get("lagging") is None
        assert not await pods.wait_deleted("lagging", uid, 0.1)
        wait = asyncio.create_task(pods.wait_deleted("lagging", uid, 5))
        await kube.api.delete(api.PODS, kube.namespace, "lagging", grace_period_seconds=0)
        assert await wait
        assert await pods.wait_deleted("lagging", uid, 1)  # gone for good: confirmed by the API too


async def test_cache_drops_managed_fields(kube: Any, make_pod: Any) -> None:
    """Cached objects carry no metadata.managedFields (memory per in-flight step)."""
    server = kube.need_server()
    body = make_pod("managed")
    body["metadata"]["managedFields"] = [{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1"}]
    await kube.api.create(api.PODS, kube.namespace, body)
    assert server.get_object(api.PODS, kube.namespace, "managed")["metadata"]["managedFields"]
    pods = informer.informer_for(kube.api, kube.namespace)
    async with pods.hold():
        await pods.wait_synced()
        cached = pods.get("managed")
        assert cached is not None
        assert "managedFields" not in cached["metadata"]


async def test_closing_the_client_stops_its_informers(kube: Any, make_pod: Any) -> None:
    """KubeApi.close() stops a lingering informer's watch first: no task outlives the client."""
    server = kube.need_server()
    own = await api.KubeApi.connect(server.cluster_config())
    pods = informer.informer_for(own, kube.namespace, linger_s=60)
    await kube.api.create(api.PODS, kube.namespace, make_pod("c1"))
    await kube.control.set_pod_phase(kube.namespace, "c1", "Succeeded")
    assert await pods.wait_for("c1", pod_status.pod_finished, 2) is not None
    assert pods.running  # lingering
    await own.close()
    assert not pods.running


async def test_cancelled_wait_leaves_no_waiter_and_releases_the_watch(kube: Any, make_pod: Any) -> None:
    """Cancelling a step's wait drops its waiter and its reference: the watch closes."""
    server = kube.need_server()
    await kube.api.create(api.PODS, kube.namespace, make_pod("cancelled"))
    pods = informer.informer_for(kube.api, kube.namespace)
    wait = asyncio.create_task(pods.wait_for("cancelled", pod_status.pod_finished, 30))
    assert await eventually(lambda: server.open_watches == 1)
    wait.cancel()
    with pytest.raises(asyncio.CancelledError):
        await wait
    assert pods.users == 0
    assert not pods.running
    assert await eventually(lambda: server.open_watches == 0)


async def test_explicit_stop_wakes_waiters_with_unavailable(kube: Any, make_pod: Any) -> None:
    """stop() ends the watch now; a step still waiting gets KubeUnavailable, not a hang."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("stopped"))
    pods = informer.informer_for(kube.api, kube.namespace)
    wait = asyncio.create_task(pods.wait_for("stopped", pod_status.pod_finished, 30))
    assert await eventually(lambda: pods.get("stopped") is not None)
    await pods.stop()
    with pytest.raises(errors.KubeUnavailable):
        await wait


async def test_stop_between_sync_and_waiter_registration_still_wakes_the_waiter(kube: Any, make_pod: Any) -> None:
    """The waiter's task has acquired the informer but not yet registered when stop() runs (the
    cache just filled): it must still get KubeUnavailable, not wait out its timeout."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("racing"))
    pods = informer.informer_for(kube.api, kube.namespace)
    wait = asyncio.create_task(pods.wait_for("racing", pod_status.pod_finished, 30))
    for _ in range(100_000):  # yield only one loop turn at a time, to stop before the waiter resumes
        if pods.get("racing") is not None:
            break
        await asyncio.sleep(0)
    assert pods.get("racing") is not None
    await pods.stop()
    with pytest.raises(errors.KubeUnavailable):
        await asyncio.wait_for(wait, 5)
