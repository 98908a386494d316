"""A HorizontalPodAutoscaler for a SandboxWarmPool, on the pool's scale subresource (pure).

The v1.0.3 SandboxWarmPool CRD declares ``subresources.scale`` with ``specReplicasPath:
.spec.replicas``, ``statusReplicasPath: .status.replicas`` and ``labelSelectorPath:
.status.selector``, so an ``autoscaling/v2`` HPA can target the pool by kind and name, as it
targets a Deployment: it reads and writes ``/scale`` and never the pool's spec directly.

What the HPA measures is the pool members' CPU (``Resource`` cpu, average utilization): the
only metric a cluster has without an adapter. Idle members use little, so a pool under no load
shrinks to ``min``; scaling on the rate of claims needs an External metric from a metrics
adapter, which this renderer does not assume. Nothing here talks to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors

__all__ = ["DEFAULT_CPU_UTILIZATION", "parse_bounds", "warm_pool_hpa"]

#: The HPA's own default target (what ``kubectl autoscale`` uses), written out so it is seen.
DEFAULT_CPU_UTILIZATION: Final = 80
_BOUNDS: Final = re.compile(r"(\d{1,6}):(\d{1,6})")


def parse_bounds(text: str) -> tuple[int, int]:
    """``MIN:MAX`` as two integers, 1 <= MIN <= MAX (an HPA refuses ``minReplicas`` 0 by default).

    >>> parse_bounds("2:10")
    (2, 10)

    Raises:
        ConfigError: not two integers, MIN below 1, or MIN above MAX.
    """
    match = _BOUNDS.fullmatch(text.strip())
    if match is None:
        raise errors.ConfigError(f"invalid --autoscale '{errors.truncate(text, 40)}': use MIN:MAX, e.g. 2:10")
    low, high = int(match[1]), int(match[2])
    if low < 1:
        raise errors.ConfigError(f"invalid --autoscale '{text}': MIN must be at least 1")
    if low > high:
        raise errors.ConfigError(f"invalid --autoscale '{text}': MIN {low} is above MAX {high}")
    return low, high


def warm_pool_hpa(
    pool: Mapping[str, Any], *, min_replicas: int, max_replicas: int, cpu_utilization: int = DEFAULT_CPU_UTILIZATION
) -> dict[str, Any]:
    """The HPA scaling the rendered SandboxWarmPool ``pool`` between the bounds (same name and namespace).

    >>> hpa = warm_pool_hpa({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
    ...     "metadata": {"name": "p", "namespace": "ns"}}, min_replicas=1, max_replicas=3)
    >>> hpa["spec"]["scaleTargetRef"], hpa["spec"]["maxReplicas"]
    ({'apiVersion': 'extensions.agents.x-k8s.io/v1beta1', 'kind': 'SandboxWarmPool', 'name': 'p'}, 3)

    Raises:
        ConfigError: ``pool`` is no SandboxWarmPool, or bounds :func:`parse_bounds` would refuse.
    """
    if pool.get("kind") != "SandboxWarmPool":
        raise errors.ConfigError(f"an autoscaler targets a SandboxWarmPool, not a {pool.get('kind')}")
    if not 1 <= min_replicas <= max_replicas:
        raise errors.ConfigError(f"invalid autoscale bounds {min_replicas}:{max_replicas}: use 1 <= MIN <= MAX")
    if not 1 <= cpu_utilization <= 100:
        raise errors.ConfigError(f"invalid CPU utilization target {cpu_utilization}: use 1-100 (percent)")
    meta = pool["metadata"]
    metadata: dict[str, Any] = {"name": meta["name"], "namespace": meta.get("namespace", "default")}
    if meta.get("labels"):
        metadata["labels"] = dict(meta["labels"])
    target = {"apiVersion": pool["apiVersion"], "kind": "SandboxWarmPool", "name": meta["name"]}
    metric = {"type": "Utilization", "averageUtilization": cpu_utilization}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": target,
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": metric}}],
        },
    }
