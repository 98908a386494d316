"""Starting a rendered ``PodUp`` service pod: create it, wait until Ready on the shared watch (I/O).

:mod:`ironflow.k8s.commands.pod_ups` renders the pod (pure) and its ``start()`` hands the manifest
here. Invariant: a service pod that does not become Ready (it cannot start, it ends, the clock
runs out, the caller is cancelled, the API fails) is deleted before the error leaves; one that
does is the caller's, and ``release_run`` or the reaper delete it with its run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ironflow import errors, labels, tracing
from ironflow.k8s import pod_wait, pods
from ironflow.kube import api as kube
from ironflow.kube import pod_problems, pod_status

__all__ = ["ServicePod", "start_service"]


@dataclass(frozen=True)
class ServicePod:
    """A Ready service pod: where agents of its run reach it (its pod IP and declared ports)."""

    name: str
    namespace: str
    ip: str
    ports: tuple[int, ...]
    api: kube.KubeApi = field(repr=False, compare=False)

    def address(self, port: int | None = None) -> str:
        """``ip:port`` of a declared port (the first when not given)."""
        chosen = self.ports[0] if port is None else port
        if chosen not in self.ports:
            raise errors.ConfigError(f"port {chosen} is not declared by service pod '{self.name}': {self.ports}")
        return f"{self.ip}:{chosen}"

    async def stop(self) -> None:
        """Delete the pod now (``release_run`` would, with its run); never raises."""
        await pods.delete_quietly(self.api, kube.PODS, self.namespace, self.name)


def _ready_or_ended(pod: Mapping[str, Any]) -> bool:
    return pod_status.pod_ready(pod) or pod_status.pod_finished(pod)


def _expiry_of(body: Mapping[str, Any]) -> str | None:
    return (body.get("metadata", {}).get("annotations") or {}).get(labels.ANNOTATION_EXPIRES_AT)


async def start_service(
    api: kube.KubeApi, body: dict[str, Any], ports: tuple[int, ...], *, timeout_s: float, image_pull_grace_s: float
) -> ServicePod:
    """Create the service pod and return it once Ready.

    Raises:
        SandboxRefused, SandboxFailed: it cannot start or the node stopped it, at once, with the reason;
            SandboxFailed also when it ended before it was Ready (its phase and exit code).
        OperationTimeout: not Ready within ``timeout_s``.
    """
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    with tracing.span("ironflow.pod_up", namespace=namespace, pod=name):
        ready = False
        try:
            await api.create(kube.PODS, namespace, body)
        except BaseException as exc:
            if pods.may_exist_after(exc):
                await pods.delete_quietly(api, kube.PODS, namespace, name, expires_at=_expiry_of(body))
            raise
        try:
            grace = pod_problems.PullGrace(image_pull_grace_s)
            pod = await pod_wait.wait_for(api, namespace, name, _ready_or_ended, timeout_s, grace)
            if pod is None:
                raise errors.OperationTimeout(f"service pod '{name}' was not Ready within {timeout_s:g}s")
            if not pod_status.pod_ready(pod):
                code = pod_status.exit_code(pod, name)
                said = f"it ended ({pod_status.phase(pod)}, exit code {code}) before its readiness probe passed"
                raise errors.SandboxFailed(f"service pod {name}", "EndedBeforeReady", said, started=True)
            ip = str((pod.get("status") or {}).get("podIP") or "")
            ready = True
            return ServicePod(name, namespace, ip, ports, api)
        finally:
            if not ready:
                await pods.delete_quietly(api, kube.PODS, namespace, name, expires_at=_expiry_of(body))
