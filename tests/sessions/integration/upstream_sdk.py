"""The upstream agent-sandbox SDK (``k8s-agent-sandbox``, pinned in the test extra) pointed at an
``ironflow sandbox serve``, with no cluster (helpers; importing this skips a test module without it).

The SDK's ``Sandbox`` takes a ``SandboxDirectConnectionConfig(api_url=…, extra_headers=…)`` and
sends the router headers itself. Two things keep it off a Kubernetes API, each through a
constructor argument or a documented method rather than a patch: ``K8sHelper(api_client=ApiClient())``
(an explicit client, so no kubeconfig is loaded), and a subclass whose ``get_pod_ip`` returns None
(the SDK asks it before every request, for an ``X-Sandbox-Pod-IP`` hint; the server routes by id,
and the default would query the API). Nothing of the SDK's private state is touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

sdk_sandbox = pytest.importorskip("k8s_agent_sandbox.sandbox", reason="pip install k8s-agent-sandbox==1.0.8")
sdk_helper = pytest.importorskip("k8s_agent_sandbox.k8s_helper", reason="pip install k8s-agent-sandbox==1.0.8")
sdk_models = pytest.importorskip("k8s_agent_sandbox.models", reason="pip install k8s-agent-sandbox==1.0.8")
kubernetes = pytest.importorskip("kubernetes")

__all__ = ["direct_config", "upstream_sandbox"]


class RoutedSandbox(sdk_sandbox.Sandbox):  # type: ignore[misc, name-defined]
    """The SDK's Sandbox, told that there is no pod IP to hint (the server routes by id)."""

    def get_pod_ip(self) -> str | None:
        return None


def direct_config(url: str, token: str) -> Any:
    """The SDK's direct connection to the server at ``url``, with its bearer token."""
    return sdk_models.SandboxDirectConnectionConfig(api_url=url, extra_headers={"Authorization": f"Bearer {token}"})


@contextlib.contextmanager
def upstream_sandbox(config: Any, sandbox_id: str) -> Iterator[Any]:
    """The SDK's ``Sandbox`` for the session ``sandbox_id``; its connection and client closed after."""
    api_client = kubernetes.client.ApiClient()
    sandbox = RoutedSandbox(
        claim_name=sandbox_id,
        sandbox_id=sandbox_id,
        connection_config=config,
        k8s_helper=sdk_helper.K8sHelper(api_client=api_client),
    )
    try:
        yield sandbox
    finally:
        sandbox.close_connection()
        api_client.close()
