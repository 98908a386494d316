"""What a ``PodUp`` service pod is made of, and the manifest it renders (pure).

A service pod (a database for the agent's tests) runs its image's own entrypoint (or the
caller's ``command`` / ``args``) under the posture of every ironflow pod: Pod Security
``restricted`` always (non-root uid, no privilege escalation, no capability, ``RuntimeDefault``
seccomp, no service-account token, no service links), a read-only root unless asked, from
:mod:`ironflow.k8s.hardening` through :mod:`ironflow.k8s.commands.specs`.

It belongs to a run: ``managed-by``, ``component=pod-up`` and ``ironflow.io/run-id`` (and the
root run's id when given), so ``release_run`` deletes it with the run's agent pods; an
``expires-at`` annotation and ``activeDeadlineSeconds`` at its lifetime, so the kubelet stops
it and the reaper deletes it when no worker is left to. Its declared ports are container ports
named :data:`~ironflow.labels.SERVICE_PORT_NAMES` in order: the rendered NetworkPolicies
(:mod:`ironflow.cluster.service_network`) open those names to agent pods, and nothing else.
No I/O: ``now`` in, manifest out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.k8s import hardening
from ironflow.k8s.commands import specs
from ironflow.kube import pod_problems

__all__ = ["MAX_PORTS", "Readiness", "ServicePodSettings", "check_port", "pod_manifest", "pod_up_labels"]

#: Ports one service pod may declare: one named port each in the rendered policies.
MAX_PORTS: Final = len(labels.SERVICE_PORT_NAMES)


def check_port(port: int, *, what: str = "port") -> int:
    """A TCP port number, 1-65535."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise errors.ConfigError(f"{what} must be a TCP port number 1-65535, got {port!r}")
    return port


@dataclass(frozen=True)
class Readiness:
    """The readiness probe the kubelet runs (one of a TCP connect, an HTTP GET, a command);
    ``PodUp.start()`` returns once it passes.

    >>> Readiness.tcp(5432).render()
    {'tcpSocket': {'port': 5432}, 'periodSeconds': 1, 'failureThreshold': 3}
    """

    tcp_port: int | None = None
    http_path: str | None = None
    http_port: int | None = None
    command: tuple[str, ...] = ()
    period_s: int = 1
    failure_threshold: int = 3

    def __post_init__(self) -> None:
        kinds = [self.tcp_port is not None, self.http_path is not None, bool(self.command)]
        if sum(kinds) != 1:
            raise errors.ConfigError("a readiness probe is one of tcp(port), http(path, port) or exec(argv...)")
        for port in (self.tcp_port, self.http_port):
            if port is not None:
                check_port(port, what="readiness port")
        if self.http_path is not None and (self.http_port is None or not self.http_path.startswith("/")):
            raise errors.ConfigError(f"readiness http needs an absolute path and a port, got '{self.http_path}'")
        if self.period_s < 1 or self.failure_threshold < 1:
            raise errors.ConfigError("readiness period_s and failure_threshold must be at least 1")

    @classmethod
    def tcp(cls, port: int, *, period_s: int = 1) -> Readiness:
        return cls(tcp_port=port, period_s=period_s)

    @classmethod
    def http(cls, path: str, port: int, *, period_s: int = 1) -> Readiness:
        return cls(http_path=path, http_port=port, period_s=period_s)

    @classmethod
    def exec(cls, *argv: str, period_s: int = 1) -> Readiness:
        return cls(command=tuple(argv), period_s=period_s)

    def render(self) -> dict[str, Any]:
        probe: dict[str, Any]
        if self.tcp_port is not None:
            probe = {"tcpSocket": {"port": self.tcp_port}}
        elif self.http_path is not None:
            probe = {"httpGet": {"path": self.http_path, "port": self.http_port}}
        else:
            probe = {"exec": {"command": list(self.command)}}
        return {**probe, "periodSeconds": self.period_s, "failureThreshold": self.failure_threshold}


@dataclass(frozen=True)
class ServicePodSettings:
    """Everything a ``PodUp`` builder sets."""

    namespace: str = "default"
    root_run_id: str | None = None
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    ports: tuple[int, ...] = ()
    readiness: Readiness | None = None
    scratch: tuple[specs.ScratchVolume, ...] = ()
    uid: int = layout.SANDBOX_UID
    read_only_root: bool = True
    resources: specs.ResourceSpec | None = None
    runtime_class: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: specs.frozen(None))
    labels: Mapping[str, str] = field(default_factory=lambda: specs.frozen(None))
    #: How long the service may live: its expiry and the kubelet's deadline.
    lifetime_s: float = 3600.0
    #: How long ``start()`` waits for Ready.
    start_timeout_s: float = 300.0
    image_pull_grace_s: float = pod_problems.DEFAULT_IMAGE_PULL_GRACE_S


def pod_up_labels(run_id: str, s: ServicePodSettings) -> dict[str, str]:
    """The caller's labels, the run's, then ironflow's two (which always win)."""
    run = {labels.LABEL_RUN_ID: labels.sanitize_label_value(run_id)}
    if s.root_run_id is not None:
        run[labels.LABEL_ROOT_RUN_ID] = labels.sanitize_label_value(s.root_run_id)
    return specs.object_labels(labels.COMPONENT_POD_UP, {**s.labels, **run})


def _container(name: str, image: str, s: ServicePodSettings, readiness: Readiness) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image}
    if s.command is not None:
        container["command"] = list(s.command)
    if s.args is not None:
        container["args"] = list(s.args)
    if s.env:
        container["env"] = [{"name": k, "value": v} for k, v in s.env]
    container["ports"] = [
        {"name": port_name, "containerPort": port, "protocol": "TCP"}
        for port_name, port in zip(labels.SERVICE_PORT_NAMES, s.ports, strict=False)
    ]
    container["readinessProbe"] = readiness.render()
    rendered = s.resources.render() if s.resources else {}
    if rendered:
        container["resources"] = rendered
    if s.scratch:
        container["volumeMounts"] = [
            {"name": specs.scratch_volume_name(i), "mountPath": v.mount_path} for i, v in enumerate(s.scratch)
        ]
    container["securityContext"] = specs.restricted_container_security(s.uid, s.read_only_root)
    return container


def pod_manifest(
    name: str, image: str, run_id: str, s: ServicePodSettings, *, now: int | None = None
) -> dict[str, Any]:
    """The service pod of run ``run_id``; ``now`` (unix seconds) fixes the expiry annotation.

    Raises:
        ConfigError: no run, no port, no readiness probe, two volumes at one path.
    """
    if not run_id:
        raise errors.ConfigError("PodUp needs the run it serves: PodUp(name, image, run_id)")
    if not s.ports:
        raise errors.ConfigError("PodUp declares no port: add .port(n) for each port agents reach")
    if s.readiness is None:
        raise errors.ConfigError("PodUp has no readiness probe: add .readiness(Readiness.tcp(port)) or another")
    specs.check_mounts("PodUp", [v.mount_path for v in s.scratch])
    lifetime = max(1, math.ceil(s.lifetime_s))
    base = int(time.time()) if now is None else now
    spec: dict[str, Any] = {
        "containers": [_container(name, image, s, s.readiness)],
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": specs.restricted_pod_security(s.uid, None),
        "terminationGracePeriodSeconds": hardening.STEP_TERMINATION_GRACE_S,
        "activeDeadlineSeconds": lifetime,
    }
    if s.scratch:
        spec["volumes"] = [v.volume(specs.scratch_volume_name(i)) for i, v in enumerate(s.scratch)]
    if s.node_selector:
        spec["nodeSelector"] = dict(s.node_selector)
    if s.runtime_class is not None:
        spec["runtimeClassName"] = s.runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": s.namespace,
            "labels": pod_up_labels(run_id, s),
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(base + lifetime)},
        },
        "spec": spec,
    }
