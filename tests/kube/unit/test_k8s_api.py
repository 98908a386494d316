"""The API layer's pure parts: resource paths, error mapping, backoff."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import errors
from ironflow.kube import api, responses


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "sub", "path"),
    [
        (api.PODS, "ns", None, None, "/api/v1/namespaces/ns/pods"),
        (api.PODS, "ns", "p", "log", "/api/v1/namespaces/ns/pods/p/log"),
        (api.PODS, None, None, None, "/api/v1/pods"),
        (api.JOBS, "ns", "j", None, "/apis/batch/v1/namespaces/ns/jobs/j"),
        (api.NAMESPACES, "ignored", "ns", None, "/api/v1/namespaces/ns"),
        (
            api.custom_resource("extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims", kind="SandboxClaim"),
            "ns",
            "c",
            None,
            "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims/c",
        ),
    ],
)
def test_resource_paths(
    resource: api.Resource, namespace: str | None, name: str | None, sub: str | None, path: str
) -> None:
    """Core, grouped, cluster-scoped and custom resources map to their REST paths."""
    assert resource.path(namespace, name, sub) == path


def test_api_versions() -> None:
    """apiVersion is the version for core and group/version otherwise."""
    assert api.PODS.api_version == "v1"
    assert api.JOBS.api_version == "batch/v1"


def test_custom_resource_needs_group_version_plural() -> None:
    """An incomplete custom resource is a ConfigError naming what is needed."""
    with pytest.raises(errors.ConfigError, match="group"):
        api.custom_resource("", "v1", "things", kind="Thing")


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (403, errors.KubeForbidden),
        (404, errors.KubeNotFound),
        (409, errors.KubeConflict),
        (410, errors.KubeGone),
        (500, errors.KubeUnavailable),
        (503, errors.KubeUnavailable),
        (0, errors.KubeUnavailable),
        (422, errors.KubernetesError),
    ],
)
def test_status_maps_to_error_class(status: int, cls: type[errors.KubernetesError]) -> None:
    """Each status becomes its class (exactly), keeping status and reason."""
    error = api.error_for_status(status, "get pods ns/p", reason="R", message="m")
    assert type(error) is cls
    assert error.status == status
    assert error.reason == "R"
    assert str(error).startswith("get pods ns/p: ")


@given(message=st.text(min_size=0, max_size=5000))
def test_error_messages_are_trimmed(message: str) -> None:
    """However long the API's message, the error text stays short."""
    assert len(str(api.error_for_status(500, "list pods ns", message=message))) < 1000


def test_network_error_says_no_answer() -> None:
    """Status 0 reads as "no answer", not as an HTTP code."""
    assert "no answer" in str(api.error_for_status(0, "get pods ns/p", message="ClientConnectorError"))


@given(attempt=st.integers(min_value=0, max_value=100))
def test_backoff_doubles_and_is_capped(attempt: int) -> None:
    """Backoff grows by doubling from 0.2 s and never exceeds 5 s."""
    delay = api.backoff_delay(attempt)
    assert 0.2 <= delay <= 5.0
    assert api.backoff_delay(attempt + 1) >= delay


def test_inline_kubeconfig_repr_hides_the_yaml() -> None:
    """The YAML (which holds credentials) is not in the repr."""
    config = api.KubeconfigInline("users: [{user: {token: abc123secret}}]", context="c")
    assert "abc123secret" not in repr(config)


def test_retry_after_is_obeyed_and_capped() -> None:
    """Retry-After seconds are used up to 10 s; without one the backoff applies."""
    assert api.retry_after_delay("2", 0) == 2.0
    assert api.retry_after_delay("600", 0) == 10.0
    assert api.retry_after_delay(None, 1) == api.backoff_delay(1)
    assert api.retry_after_delay("Wed, 21 Oct 2015 07:28:00 GMT", 0) == api.backoff_delay(0)


def test_a_delete_under_a_uid_precondition_carries_all_its_options_in_its_body() -> None:
    """The API server reads a body's DeleteOptions or else the query's, never both: with a body, a
    policy in the query would be dropped (a Job's pods then orphaned, seen against the real one)."""
    assert responses.delete_options(None, 0, "Background") == (
        [("gracePeriodSeconds", "0"), ("propagationPolicy", "Background")],
        None,
    )
    query, body = responses.delete_options("u-1", None, "Background")
    assert query == []
    assert body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u-1"},
        "propagationPolicy": "Background",
    }
