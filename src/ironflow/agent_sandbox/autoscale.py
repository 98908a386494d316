"""What scales a SandboxWarmPool: the demand scaler's Deployment and RBAC, or a CPU HPA (pure).

The default (``sandbox render warm-pool --autoscale MIN:MAX``) is :func:`demand_scaler`: a
one-replica Deployment running ``ironflow sandbox pool-scaler`` (the worker image carries the
CLI) under a ServiceAccount that may read claims, read the one pool, and get/patch that
pool's ``/scale``: nothing more. It follows claims per minute
(:mod:`~ironflow.agent_sandbox.demand`); ``--autoscale-by cpu`` renders :func:`warm_pool_hpa`
instead, kept for pools whose idle members do measurable work.

The v1.0.3 SandboxWarmPool CRD declares ``subresources.scale`` with ``specReplicasPath:
.spec.replicas``, ``statusReplicasPath: .status.replicas`` and ``labelSelectorPath:
.status.selector``, so an ``autoscaling/v2`` HPA can target the pool by kind and name, as it
targets a Deployment: it reads and writes ``/scale`` and never the pool's spec directly.

What the HPA measures is the pool members' CPU (``Resource`` cpu, average utilization): the
only metric a cluster has without an adapter. Idle members use little, so the HPA keeps the
pool at ``min`` however fast claims drain it: why demand is the default. Nothing here talks
to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import demand, models
from ironflow.cluster import workloads

__all__ = ["DEFAULT_CPU_UTILIZATION", "demand_scaler", "parse_bounds", "scaler_rules", "warm_pool_hpa"]

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


def _pool_meta(pool: Mapping[str, Any]) -> tuple[str, str]:
    if pool.get("kind") != "SandboxWarmPool":
        raise errors.ConfigError(f"an autoscaler targets a SandboxWarmPool, not a {pool.get('kind')}")
    meta = pool["metadata"]
    return str(meta["name"]), str(meta.get("namespace", "default"))


def scaler_rules(pool: str) -> list[dict[str, Any]]:
    """The Role rules of a pool's demand scaler: read claims, read the pool (its ready members:
    ``/scale`` carries no ready count), get and patch its ``/scale``.

    >>> [r["resources"] for r in scaler_rules("p")]
    [['sandboxclaims'], ['sandboxwarmpools'], ['sandboxwarmpools/scale']]
    """
    group = [models.EXTENSIONS_GROUP]
    return [
        {"apiGroups": group, "resources": ["sandboxclaims"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": group,
            "resources": ["sandboxwarmpools"],
            "resourceNames": [pool],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": group,
            "resources": ["sandboxwarmpools/scale"],
            "resourceNames": [pool],
            "verbs": ["get", "patch"],
        },
    ]


def demand_scaler(
    pool: Mapping[str, Any], policy: demand.DemandPolicy, *, image: str = workloads.DEFAULT_WORKER_IMAGE
) -> list[dict[str, Any]]:
    """The ServiceAccount, Role, RoleBinding and Deployment of the demand scaler of ``pool``
    (named ``<pool>-scaler``, in the pool's namespace).

    >>> objs = demand_scaler({"kind": "SandboxWarmPool", "metadata": {"name": "p", "namespace": "ns"}},
    ...     demand.DemandPolicy(min_replicas=1, max_replicas=5))
    >>> [o["kind"] for o in objs]
    ['ServiceAccount', 'Role', 'RoleBinding', 'Deployment']
    >>> objs[3]["spec"]["template"]["spec"]["containers"][0]["args"][:4]
    ['sandbox', 'pool-scaler', '--pool', 'p']

    Raises:
        ConfigError: ``pool`` is no SandboxWarmPool, or ``policy`` cannot scale.
    """
    pool_name, namespace = _pool_meta(pool)
    policy.validate()
    name = f"{pool_name}-scaler"
    managed = {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": managed}
    args = ["sandbox", "pool-scaler", "--pool", pool_name, "-n", namespace]
    args += ["--min", str(policy.min_replicas), "--max", str(policy.max_replicas), "--spare", str(policy.spare)]
    args += ["--ready-time", f"{policy.ready_s:g}s", "--window", f"{policy.window_s:g}s"]
    args += ["--cooldown", f"{policy.cooldown_s:g}s"]
    container = {
        "name": "pool-scaler",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": args,
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    }
    pod = workloads.pod_spec(container, automount=True, serviceAccountName=name)
    # One scaler per pool: two would each step down a cooldown apart.
    deployment = workloads.deployment_object(name, namespace, 1, pod, strategy={"type": "Recreate"})
    for labelled in (deployment["metadata"], deployment["spec"]["template"]["metadata"]):
        labelled["labels"].update(managed)
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": meta, "rules": scaler_rules(pool_name)},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": name},
            "subjects": [subject],
        },
        deployment,
    ]


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
    _pool_meta(pool)
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
