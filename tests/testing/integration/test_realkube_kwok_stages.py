"""kwok's stages (``ironflow.testing._kwok_stages``) against the real kube-apiserver of the real-API
tier: where kwok stands in for a kubelet, it must not do what no kubelet does.

A pod deleted with no grace is gone from the apiserver at once. kwok's stock pod-delete stage
deleted it again, by name, once kwok read the delete's events: when kwok lagged, that delete took
the next pod made under the name (a paused session's resumed pod, in CI). A kubelet deletes with
the pod's UID as a precondition. Holding kwok stopped makes the lag certain.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from typing import Any

from ironflow.testing.kubeenv import KubeEnv, KubeEnvError
from ironflow.testing.polling import eventually_sync


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "runner:test"}]},
    }


def _uid(env: KubeEnv, pods: str, name: str) -> str | None:
    """The pod's UID, or None once it is gone (or going)."""
    with contextlib.suppress(KubeEnvError):
        pod = env.request("GET", f"{pods}/{name}")
        return None if pod["metadata"].get("deletionTimestamp") else str(pod["metadata"]["uid"])
    return None


def _running(env: KubeEnv, pods: str, name: str) -> bool:
    return bool(env.request("GET", f"{pods}/{name}").get("status", {}).get("phase") == "Running")


def test_a_lagging_kwok_never_deletes_the_next_pod_under_a_name_deleted_with_no_grace(kube_env: KubeEnv) -> None:
    with kube_env.namespace(f"kwok-{uuid.uuid4().hex[:8]}") as namespace:
        pods = f"/api/v1/namespaces/{namespace}/pods"
        for name in ("reused", "marker"):
            kube_env.request("POST", pods, _pod(name))
            eventually_sync(functools.partial(_running, kube_env, pods, name), limit_s=60, what=f"{name} Running")
        with kube_env.stopped("kwok"):
            kube_env.request("DELETE", f"{pods}/reused", {"gracePeriodSeconds": 0})
            assert _uid(kube_env, pods, "reused") is None  # the apiserver removed it at once
            made = kube_env.request("POST", pods, _pod("reused"))["metadata"]["uid"]
            # A graceful delete only kwok finishes: once "marker" is gone, kwok has read every event before it.
            kube_env.request("DELETE", f"{pods}/marker", {"gracePeriodSeconds": 1})

        def marker_gone() -> bool:
            with contextlib.suppress(KubeEnvError):
                kube_env.request("GET", f"{pods}/marker")
                return False
            return True

        eventually_sync(marker_gone, limit_s=60, interval_s=0.05, what="kwok to finish the marker's delete")
        assert _uid(kube_env, pods, "reused") == made
