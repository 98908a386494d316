"""What the in-cluster router may route to (``judge``, pure): Sandboxes' own pods and ironflow
session pods, Running and Ready, at their own address; nothing else, whatever the caller hints."""

from __future__ import annotations

from typing import Any

import pytest

from ironflow import labels
from ironflow.agent_sandbox.sandbox_routes import judge
from ironflow.sessions.routes import NotRoutable, RouteTarget

SANDBOX = {"metadata": {"name": "sbx", "uid": "u-sandbox"}}
TARGET = RouteTarget("sbx", "agents")


def _pod(**changes: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "sbx",
            "ownerReferences": [{"kind": "Sandbox", "uid": "u-sandbox", "controller": True}],
            "labels": {},
        },
        "status": {
            "phase": "Running",
            "podIP": "10.244.0.9",
            "podIPs": [{"ip": "10.244.0.9"}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        pod[section][field] = value
    return pod


def test_a_sandboxs_own_ready_pod_is_routed_to_at_its_address() -> None:
    assert judge(TARGET, SANDBOX, _pod()) == "10.244.0.9"
    assert judge(RouteTarget("sbx", "agents", pod_ip="10.244.0.9"), SANDBOX, _pod()) == "10.244.0.9"


def test_an_ironflow_session_pod_without_a_sandbox_is_routed_to() -> None:
    session = {
        labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
        labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_SESSION,
    }
    assert judge(TARGET, None, _pod(metadata__labels=session, metadata__ownerReferences=[])) == "10.244.0.9"


@pytest.mark.parametrize(
    ("sandbox", "pod", "status", "words"),
    [
        (SANDBOX, None, 404, "no sandbox agents/sbx"),
        (None, None, 404, "no sandbox agents/sbx"),
        # Any other pod of that name: a database, the worker, another tenant's service.
        (None, _pod(metadata__ownerReferences=[]), 403, "is not a sandbox"),
        (None, _pod(metadata__labels={labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE}), 403, "is not a sandbox"),
        # A Sandbox whose pod-name annotation names a pod it does not control.
        (SANDBOX, _pod(metadata__ownerReferences=[{"kind": "Sandbox", "uid": "other", "controller": True}]), 403,
         "is not the pod of sandbox"),
        (SANDBOX, _pod(metadata__ownerReferences=[{"kind": "Sandbox", "uid": "u-sandbox"}]), 403,
         "is not the pod of sandbox"),
        (SANDBOX, _pod(status__phase="Pending"), 503, "is not ready"),
        (SANDBOX, _pod(status__conditions=[{"type": "Ready", "status": "False"}]), 503, "is not ready"),
        (SANDBOX, _pod(status__podIP=None), 503, "is not ready"),
        (SANDBOX, _pod(metadata__deletionTimestamp="2026-12-03T00:00:00Z"), 503, "is not ready"),
    ],
)  # fmt: skip
def test_what_is_no_routable_sandbox_is_refused(
    sandbox: dict[str, Any] | None, pod: dict[str, Any] | None, status: int, words: str
) -> None:
    with pytest.raises(NotRoutable, match=words) as refused:
        judge(TARGET, sandbox, pod)
    assert refused.value.status == status


def test_a_pod_ip_hint_never_picks_the_address() -> None:
    with pytest.raises(NotRoutable, match=r"10\.0\.0\.5 is not the address of sandbox agents/sbx") as refused:
        judge(RouteTarget("sbx", "agents", pod_ip="10.0.0.5"), SANDBOX, _pod())
    assert refused.value.status == 403
