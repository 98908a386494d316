"""``PodUp``: start a service pod for a run (a database for the agent's tests) and wait until Ready.

The pod is hardened as every ironflow pod, labelled to its run (``release_run`` deletes it with
the run, the reaper at its expiry) and reachable by agent pods on its declared ports only, under
the NetworkPolicies ``ironflow manifests`` renders (:mod:`ironflow.cluster.service_network`).
Agents reach it by its pod IP (``ServicePod.address``): the worker creates no Service.

>>> up = PodUp("db", "postgres:16", "run-1").port(5432).readiness(Readiness.tcp(5432))
>>> pod = up.scratch("/var/lib/postgresql/data", "2Gi").build_pod(now=0)
>>> pod["metadata"]["labels"]["ironflow.io/run-id"], pod["spec"]["containers"][0]["ports"][0]["name"]
('run-1', 'svc-0')

The values are frozen and their builders return copies; ``start`` hands the manifest to
:mod:`ironflow.k8s.commands.service_start`, the only I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ironflow import errors, labels
from ironflow.k8s.commands import service_specs, service_start, specs
from ironflow.k8s.commands.service_specs import Readiness
from ironflow.kube import api as kube

__all__ = ["PodUp", "Readiness"]


@dataclass(frozen=True)
class PodUp:
    """One service pod of run ``run_id``, named ``name`` (a DNS label, also its container's name)."""

    name: str
    image: str
    run_id: str
    settings: service_specs.ServicePodSettings = field(default_factory=service_specs.ServicePodSettings)
    api: kube.KubeApi | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        specs.check_name("PodUp", self.name)
        if not self.image.strip():
            raise errors.ConfigError("PodUp image must not be empty")
        if not self.run_id:
            raise errors.ConfigError("PodUp needs the run it serves: PodUp(name, image, run_id)")

    def _set(self, **changes: Any) -> PodUp:
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, **changes))

    # -- builders --

    def client(self, api: kube.KubeApi) -> PodUp:
        """The API connection ``start()`` uses."""
        return dataclasses.replace(self, api=api)

    def namespace(self, namespace: str) -> PodUp:
        """Where it runs: the namespace of the run's agent pods (the policies are per namespace)."""
        return self._set(namespace=namespace)

    def root_run(self, root_run_id: str) -> PodUp:
        """Also labelled to the root run, so releasing the root releases it."""
        return self._set(root_run_id=root_run_id)

    def port(self, number: int) -> PodUp:
        """A TCP port agents of the run may reach (named ``svc-0``, ``svc-1``... in call order)."""
        service_specs.check_port(number)
        if number in self.settings.ports:
            raise errors.ConfigError(f"PodUp port {number} is declared twice")
        if len(self.settings.ports) >= service_specs.MAX_PORTS:
            raise errors.ConfigError(f"PodUp declares at most {service_specs.MAX_PORTS} ports")
        return self._set(ports=(*self.settings.ports, number))

    def readiness(self, probe: Readiness) -> PodUp:
        """The probe ``start()`` waits for (required)."""
        return self._set(readiness=probe)

    def command(self, *argv: str) -> PodUp:
        """Replace the image's entrypoint."""
        return self._set(command=tuple(argv))

    def args(self, *argv: str) -> PodUp:
        """Arguments to the entrypoint."""
        return self._set(args=tuple(argv))

    def env(self, name: str, value: str) -> PodUp:
        """A plain env var; never a secret value (it would be readable in the pod spec)."""
        if not name:
            raise errors.ConfigError("env var name must not be empty")
        return self._set(env=(*self.settings.env, (name, value)))

    def scratch(self, mount_path: str, size_limit: str = "1Gi", *, memory: bool = False) -> PodUp:
        """A writable ``emptyDir`` at ``mount_path`` (the root is read-only), at most ``size_limit``."""
        volume = specs.ScratchVolume(mount_path, size_limit, memory)
        return self._set(scratch=(*self.settings.scratch, volume))

    def restricted(self, uid: int, *, read_only_root: bool = True) -> PodUp:
        """Run as ``uid`` (non-root; also group and fsGroup); the root stays read-only unless told."""
        if isinstance(uid, bool) or not isinstance(uid, int) or uid <= 0:
            raise errors.ConfigError(f"restricted uid must be a positive integer (non-root), got {uid!r}")
        return self._set(uid=uid, read_only_root=read_only_root)

    def resources(self, spec: specs.ResourceSpec) -> PodUp:
        return self._set(resources=spec)

    def runtime_class(self, name: str) -> PodUp:
        if not name.strip():
            raise errors.ConfigError("runtime class must not be empty")
        return self._set(runtime_class=name)

    def node_selector(self, key: str, value: str) -> PodUp:
        return self._set(node_selector=specs.frozen({**self.settings.node_selector, key: value}))

    def label(self, key: str, value: str) -> PodUp:
        """Add a label; ironflow's reserved keys and the run keys are refused (the run labels it)."""
        return self.labels({**self.settings.labels, key: value})

    def labels(self, pairs: Mapping[str, str]) -> PodUp:
        specs.check_labels(pairs)
        for key in (labels.LABEL_RUN_ID, labels.LABEL_ROOT_RUN_ID):
            if key in pairs:
                raise errors.ConfigError(f"PodUp sets '{key}' from its run: drop that label")
        return self._set(labels=specs.frozen(pairs))

    def lifetime(self, seconds: float) -> PodUp:
        """How long it may live at most: its expiry and the kubelet's deadline (default an hour)."""
        if not (math.isfinite(seconds) and seconds > 0):
            raise errors.ConfigError(f"lifetime must be a finite number of seconds > 0, got {seconds!r}")
        return self._set(lifetime_s=float(seconds))

    def start_timeout(self, seconds: float) -> PodUp:
        """How long ``start()`` waits for Ready (default 300 s)."""
        return self._set(start_timeout_s=specs.check_duration("start_timeout", seconds))

    def image_pull_grace(self, seconds: float) -> PodUp:
        """How long a failing image pull is tolerated before ``start()`` ends with it."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise errors.ConfigError(f"image_pull_grace must be a finite number of seconds >= 0, got {seconds!r}")
        return self._set(image_pull_grace_s=float(seconds))

    # -- rendering and starting --

    def build_pod(self, *, now: int | None = None) -> dict[str, Any]:
        """The Pod manifest; ``now`` (unix seconds) fixes the expiry annotation."""
        return service_specs.pod_manifest(self.name, self.image, self.run_id, self.settings, now=now)

    async def start(self, api: kube.KubeApi | None = None) -> service_start.ServicePod:
        """Create the pod and return it once Ready; deleted on every path that raises.

        Raises:
            SandboxRefused, SandboxFailed: it cannot start, the node stopped it, or it ended before Ready.
            OperationTimeout: not Ready within the start timeout.
        """
        client = api or self.api
        if client is None:
            raise errors.ConfigError("PodUp.start needs an API client: pass start(api) or build with .client(api)")
        s = self.settings
        return await service_start.start_service(
            client, self.build_pod(), s.ports, timeout_s=s.start_timeout_s, image_pull_grace_s=s.image_pull_grace_s
        )
