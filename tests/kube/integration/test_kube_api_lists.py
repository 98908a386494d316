"""Contract: label and field selectors, paginated lists, list_all and delete_collection."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors
from ironflow.kube import api


async def _seed(kube: Any, make_pod: Any) -> None:
    pods = {
        "a": {"tier": "web", "env": "prod"},
        "b": {"tier": "web", "env": "dev"},
        "c": {"tier": "db", "env": "prod"},
        "d": {"tier": "cache"},
        "e": {},
    }
    for name, labels in pods.items():
        await kube.api.create(api.PODS, kube.namespace, make_pod(name, labels=labels))


async def _names(kube: Any, **selectors: str) -> list[str]:
    listed = await kube.api.list(api.PODS, kube.namespace, **selectors)
    return sorted(p["metadata"]["name"] for p in listed.items)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", ["a", "b"]),
        ("tier==web", ["a", "b"]),
        ("tier!=web", ["c", "d", "e"]),
        ("tier in (web, db)", ["a", "b", "c"]),
        ("tier notin (web,db)", ["d", "e"]),
        ("env", ["a", "b", "c"]),
        ("!env", ["d", "e"]),
        ("tier=web,env=prod", ["a"]),
        ("tier in (web),!env", []),
    ],
)
async def test_label_selector_operators(kube: Any, make_pod: Any, selector: str, expected: list[str]) -> None:
    """Each label selector operator selects as on a real API server (!= and notin include unlabelled)."""
    await _seed(kube, make_pod)
    assert await _names(kube, label_selector=selector) == expected


async def test_malformed_label_selector_is_bad_request(kube: Any) -> None:
    """A selector the server cannot parse answers 400."""
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.list(api.PODS, kube.namespace, label_selector="tier in web")
    assert caught.value.status == 400


async def test_field_selector_on_metadata_name(kube: Any, make_pod: Any) -> None:
    """metadata.name selects one object; != excludes it."""
    await _seed(kube, make_pod)
    assert await _names(kube, field_selector="metadata.name=c") == ["c"]
    assert await _names(kube, field_selector="metadata.name!=c") == ["a", "b", "d", "e"]


async def test_unknown_field_selector_is_bad_request(kube: Any) -> None:
    """A field the resource does not index answers 400, as a real server does."""
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.list(api.PODS, kube.namespace, field_selector="spec.containers=x")
    assert caught.value.status == 400
    assert "field label not supported" in str(caught.value)


async def test_list_pages_with_limit_and_continue(kube: Any, make_pod: Any) -> None:
    """limit cuts a list into pages joined by continue tokens, each object once."""
    await _seed(kube, make_pod)
    first = await kube.api.list(api.PODS, kube.namespace, limit=2)
    assert len(first.items) == 2
    assert first.continue_token
    second = await kube.api.list(api.PODS, kube.namespace, limit=2, continue_token=first.continue_token)
    third = await kube.api.list(api.PODS, kube.namespace, limit=2, continue_token=second.continue_token)
    assert third.continue_token is None
    names = [p["metadata"]["name"] for page in (first, second, third) for p in page.items]
    assert sorted(names) == ["a", "b", "c", "d", "e"]
    assert len(names) == len(set(names))


async def test_list_all_follows_continue_tokens(kube: Any, make_pod: Any) -> None:
    """list_all returns every page's items in one ObjectList, counting one request per page."""
    await _seed(kube, make_pod)
    before = kube.api.counters.by_verb["list"]
    everything = await kube.api.list_all(api.PODS, kube.namespace, page_size=2)
    assert sorted(p["metadata"]["name"] for p in everything.items) == ["a", "b", "c", "d", "e"]
    assert kube.api.counters.by_verb["list"] - before == 3
    assert all(p["kind"] == "Pod" and p["apiVersion"] == "v1" for p in everything.items)


async def test_list_across_namespaces(kube: Any, make_pod: Any) -> None:
    """namespace=None lists every namespace's objects."""
    await kube.api.create(api.PODS, kube.namespace, make_pod("here"))
    listed = await kube.api.list(api.PODS, None, field_selector=f"metadata.namespace={kube.namespace}")
    assert [p["metadata"]["name"] for p in listed.items] == ["here"]


async def test_bad_continue_token_is_bad_request(kube: Any) -> None:
    """A continue token the server did not issue answers 400."""
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.list(api.PODS, kube.namespace, limit=1, continue_token="garbage!")
    assert caught.value.status == 400


async def test_continue_token_older_than_history_is_gone(kube: Any, make_pod: Any) -> None:
    """A continue token from before a compaction answers 410 (KubeGone)."""
    server = kube.need_server()
    await _seed(kube, make_pod)
    first = await kube.api.list(api.PODS, kube.namespace, limit=2)
    await kube.api.create(api.PODS, kube.namespace, make_pod("late"))
    server.compact()
    with pytest.raises(errors.KubeGone):
        await kube.api.list(api.PODS, kube.namespace, limit=2, continue_token=first.continue_token)


async def test_delete_collection_deletes_only_selected(kube: Any, make_pod: Any) -> None:
    """delete_collection removes exactly the objects its selector matches, in one request."""
    await _seed(kube, make_pod)
    before = kube.api.counters.by_verb["deletecollection"]
    await kube.api.delete_collection(api.PODS, kube.namespace, label_selector="tier=web")
    assert kube.api.counters.by_verb["deletecollection"] - before == 1
    assert await _names(kube) == ["c", "d", "e"]


async def test_delete_collection_of_configmaps_by_label(kube: Any) -> None:
    """delete_collection works for any resource, e.g. prompt ConfigMaps of one run."""
    for name, run in (("cm1", "r1"), ("cm2", "r1"), ("cm3", "r2")):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"run": run}}}
        await kube.api.create(api.CONFIGMAPS, kube.namespace, body)
    await kube.api.delete_collection(api.CONFIGMAPS, kube.namespace, label_selector="run=r1")
    # only ours: a real namespace also holds kube-root-ca.crt
    left = await kube.api.list(api.CONFIGMAPS, kube.namespace, label_selector="run")
    assert [c["metadata"]["name"] for c in left.items] == ["cm3"]
