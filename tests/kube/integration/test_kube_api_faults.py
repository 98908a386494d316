"""Contract: denied verbs, injected failures and dropped connections map to ironflow errors,
and no error carries the bearer token."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import errors
from ironflow.kube import api
from ironflow.testing import find_leaks


async def test_denied_verb_is_forbidden(kube: Any) -> None:
    """deny("jobs", "list") makes listing Jobs a KubeForbidden (403), not retryable."""
    server = kube.need_server()
    server.deny("jobs", "list")
    with pytest.raises(errors.KubeForbidden) as caught:
        await kube.api.list(api.JOBS, kube.namespace)
    assert caught.value.status == 403
    assert not caught.value.retryable
    assert "jobs" in str(caught.value)
    # other verbs and resources are untouched
    await kube.api.list(api.PODS, kube.namespace)


async def test_denial_can_be_scoped_to_a_namespace(kube: Any) -> None:
    """A namespaced denial leaves other namespaces alone."""
    server = kube.need_server()
    server.deny("configmaps", "create", namespace=kube.namespace)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    with pytest.raises(errors.KubeForbidden):
        await kube.api.create(api.CONFIGMAPS, kube.namespace, body)
    await kube.api.create(api.CONFIGMAPS, "default", body)


async def test_denied_log_subresource(kube: Any, make_pod: Any) -> None:
    """pods/log can be denied on its own."""
    server = kube.need_server()
    await kube.api.create(api.PODS, kube.namespace, make_pod("p"))
    await kube.control.set_pod_phase(kube.namespace, "p", "Running")
    server.deny("pods/log", "get")
    with pytest.raises(errors.KubeForbidden):
        await kube.api.read_log(kube.namespace, "p")
    await kube.api.get(api.PODS, kube.namespace, "p")


@pytest.mark.parametrize(
    ("status", "error_type", "retryable"),
    [
        (500, errors.KubeUnavailable, True),
        (503, errors.KubeUnavailable, True),
        (409, errors.KubeConflict, True),
        (410, errors.KubeGone, False),
        (404, errors.KubeNotFound, False),
        (429, errors.KubernetesError, True),
        (422, errors.KubernetesError, False),
    ],
)
async def test_injected_status_maps_to_its_error(
    kube: Any, make_pod: Any, status: int, error_type: type[errors.KubernetesError], retryable: bool
) -> None:
    """Each HTTP status becomes its ironflow error class, with the status kept and retryable set."""
    server = kube.need_server()
    server.fail("create", "pods", status=status, times=10, retry_after=0)
    with pytest.raises(error_type) as caught:
        await kube.api.create(api.PODS, kube.namespace, make_pod("f"))
    assert caught.value.status == status
    assert caught.value.retryable is retryable
    assert caught.value.__cause__ is None or isinstance(caught.value.__cause__, Exception)


async def test_throttled_request_is_sent_again_after_retry_after(kube: Any, make_pod: Any) -> None:
    """A 429 (API priority and fairness) is retried after Retry-After; the object is created once."""
    server = kube.need_server()
    rule = server.fail("create", "pods", status=429, times=2, retry_after=0)
    created = await kube.api.create(api.PODS, kube.namespace, make_pod("throttled"))
    assert rule.fired == 2
    assert created["metadata"]["name"] == "throttled"
    assert server.count("create", "pods") == 3


async def test_persistent_throttling_surfaces_as_retryable_error(kube: Any, make_pod: Any) -> None:
    """After three retries a 429 surfaces: a retryable KubernetesError with status 429."""
    server = kube.need_server()
    server.fail("get", "pods", status=429, times=10, retry_after=0)
    with pytest.raises(errors.KubernetesError) as caught:
        await kube.api.get(api.PODS, kube.namespace, "x")
    assert caught.value.status == 429
    assert caught.value.retryable
    assert server.count("get", "pods") == 4


async def test_fault_hits_only_the_nth_call(kube: Any, make_pod: Any) -> None:
    """fail(nth=2) lets the first call through and fails the second only."""
    server = kube.need_server()
    rule = server.fail("get", "pods", nth=2, status=500)
    await kube.api.create(api.PODS, kube.namespace, make_pod("nth"))
    await kube.api.get(api.PODS, kube.namespace, "nth")
    with pytest.raises(errors.KubeUnavailable):
        await kube.api.get(api.PODS, kube.namespace, "nth")
    await kube.api.get(api.PODS, kube.namespace, "nth")
    assert rule.fired == 1


async def test_dropped_connection_is_unavailable_with_status_zero(kube: Any, make_pod: Any) -> None:
    """A connection closed without an answer is KubeUnavailable with status 0, chained to the cause."""
    server = kube.need_server()
    server.fail("create", "pods", drop=True)
    with pytest.raises(errors.KubeUnavailable) as caught:
        await kube.api.create(api.PODS, kube.namespace, make_pod("dropped"))
    assert caught.value.status == 0
    assert caught.value.retryable
    assert caught.value.__cause__ is not None
    await kube.api.create(api.PODS, kube.namespace, make_pod("dropped"))


async def test_idempotent_call_survives_one_dropped_connection(kube: Any, make_pod: Any) -> None:
    """aiohttp resends an idempotent request (DELETE) once on a fresh connection; two drops fail it."""
    server = kube.need_server()
    await kube.api.create(api.PODS, kube.namespace, make_pod("p1"))
    await kube.api.create(api.PODS, kube.namespace, make_pod("p2"))
    once = server.fail("delete", "pods", drop=True)
    await kube.api.delete(api.PODS, kube.namespace, "p1")
    assert once.fired == 1
    server.fail("delete", "pods", drop=True, times=2)
    with pytest.raises(errors.KubeUnavailable):
        await kube.api.delete(api.PODS, kube.namespace, "p2")


async def test_unreachable_server_is_unavailable() -> None:
    """Nothing listening on the port: KubeUnavailable, status 0."""
    yaml_text = (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:9\n"
        "users:\n- name: u\n  user:\n    token: secret-token-never-shown\n"
        "contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
    )
    async with await api.KubeApi.connect(api.KubeconfigInline(yaml_text), request_timeout_s=2) as kube_api:
        with pytest.raises(errors.KubeUnavailable) as caught:
            await kube_api.get(api.PODS, "default", "x")
    assert caught.value.status == 0
    assert not find_leaks(["secret-token-never-shown"], caught.value, repr(caught.value), caught.value.args)


async def test_errors_never_carry_the_bearer_token(kube: Any, make_pod: Any) -> None:
    """Across refusals of every kind, no error text holds the token."""
    server = kube.need_server()
    caught: list[BaseException] = []
    server.deny("pods", "list")
    server.fail("create", "pods", status=500)
    server.fail("get", "pods", drop=True)
    for call in (
        kube.api.list(api.PODS, kube.namespace),
        kube.api.create(api.PODS, kube.namespace, make_pod("t")),
        kube.api.get(api.PODS, kube.namespace, "t"),
        kube.api.delete(api.PODS, kube.namespace, "nope"),
    ):
        try:
            await call
        except errors.KubernetesError as exc:
            caught.append(exc)
    assert len(caught) == 4
    for error in caught:
        assert not find_leaks([server.token], error, repr(error), error.args, str(error.__cause__ or ""))
