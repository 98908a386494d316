"""Run agent steps through SandboxClaims: the builder of the settings, and ``run`` / ``release_run``.

``AgentSandboxProvider(pod)`` takes the same :class:`~ironflow.k8s.pod_provider.K8sEphemeralProvider`
that describes the hardened pod; the SandboxTemplate and its SandboxWarmPool are rendered
from it (:func:`~ironflow.agent_sandbox.step_render.template_objects`, applied by ``ironflow sandbox
apply-template``), so a warm sandbox is the very pod the ephemeral provider would create. The
settings value and its rendering live in :mod:`~ironflow.agent_sandbox.step_render`, the I/O in
:mod:`~ironflow.agent_sandbox.claim_steps`; each call opens its admin client and closes it.

A step (:meth:`AgentSandboxProvider.run`):

1. renders and validates the step first (nothing exists before it is accepted); a step that
   would change the pod (volumes, runtime class, egress profile...) is refused: a warm pod's
   spec is fixed by the template;
2. deletes the previous attempt's claim of the same run and step, and waits until it is gone;
3. creates a SandboxClaim (run/step labels from ``config.scope``, ``ironflow.io/expires-at``, ``lifecycle.shutdownTime``
   at the same moment, shutdownPolicy Delete) and waits for Ready on the shared claim watch;
4. only then issues the auth-proxy token and writes it into the sandbox over exec (stdin, file
   mode 0600 under ``$HOME/.ironflow``): never into the claim, whose env would force a cold start
   and is readable by anyone who can read claims; a large prompt goes the same way, and so does
   the egress-only token of a pod whose ``egress:`` opens anything (the template carries the
   egress proxy's address and a NetworkPolicy letting the pod reach only the proxy);
5. execs the agent (the same ``claude`` command line as every sandbox), parses its output;
6. always: revokes the token and deletes the claim (the Sandbox and pod follow by cascade),
   shielded from cancellation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ironflow import errors, results, settings_file, steps
from ironflow.agent_sandbox import apply, claim_sessions, claims, models, rules
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_steps import ClaimStepRunner
from ironflow.auth_proxy import issuing
from ironflow.egress import policy as egress_policy
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import api as kube
from ironflow.kube import clusters, connections, quantities
from ironflow.provider import LogSink, ProviderBase

__all__ = ["AgentSandboxProvider"]

_YAML_KEYS: Final = (
    "pod",
    "template",
    "warm_pool",
    "replicas",
    "api_version",
    "ready_timeout_seconds",
    "network_policy",
    "home_volume",
)


@dataclass(frozen=True, init=False)
class AgentSandboxProvider(ProviderBase):
    """Agent steps in agent-sandbox sandboxes: one SandboxClaim per step, warm when the pool has one.

    >>> p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("ghcr.io/acme/runner:1").namespace("agents"))
    >>> p.settings.namespace, p.settings.pool, [o["kind"] for o in sandbox_steps.template_objects(p.settings)]
    ('agents', 'ironflow-agent', ['SandboxTemplate', 'SandboxWarmPool'])
    """

    settings: sandbox_steps.AgentSandboxSettings
    #: The API clients this provider opened (one per loop and cluster), closed by :meth:`aclose`.
    _connections: connections.Connections = field(repr=False, compare=False)

    def __init__(self, pod: K8sEphemeralProvider | sandbox_steps.AgentSandboxSettings) -> None:
        settings = (
            pod if isinstance(pod, sandbox_steps.AgentSandboxSettings) else sandbox_steps.AgentSandboxSettings(pod)
        )
        if not settings.pod.is_sandboxed:
            raise errors.ConfigError(
                "AgentSandboxProvider needs the hardened pod: build it with K8sEphemeralProvider.sandboxed(image)"
            )
        if settings.pod.settings.relays:  # a warm pod's environment is its template's: no per-step relay tokens yet
            raise errors.ConfigError(
                "pod.relays: agent-sandbox does not deliver relays yet; run the step with --backend k8s or local"
            )
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "_connections", connections.Connections())

    def _with(self, **changes: Any) -> AgentSandboxProvider:
        """A new provider with changed settings; it shares this one's connections (closing either closes both)."""
        built = AgentSandboxProvider(dataclasses.replace(self.settings, **changes))
        object.__setattr__(built, "_connections", self._connections)
        return built

    # -- builders --

    def namespace(self, namespace: str) -> AgentSandboxProvider:
        """Where claims, the template and the pool live (the pod provider's namespace)."""
        return self._with(pod=self.settings.pod.namespace(namespace))

    def template(self, name: str) -> AgentSandboxProvider:
        """The SandboxTemplate (and default pool) name."""
        rules.check(models.SandboxWarmPool(name=name, template=name))
        return self._with(template=name)

    def warm_pool(self, name: str | None = None, *, replicas: int = 1) -> AgentSandboxProvider:
        """Keep ``replicas`` sandboxes ready in pool ``name`` (default: the template's name); 0 = cold only."""
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise errors.ConfigError(f"warm pool replicas must be an integer >= 0, got {replicas!r}")
        return self._with(warm_pool=name, replicas=replicas)

    def api_version(self, version: models.ApiVersion | str) -> AgentSandboxProvider:
        """``v1beta1`` (agent-sandbox 0.5+, 1.0) or ``v1alpha1`` (0.4.x)."""
        try:
            return self._with(api_version=models.ApiVersion(version))
        except ValueError:
            raise errors.ConfigError(f"api_version must be v1alpha1 or v1beta1, got '{version}'") from None

    def ready_timeout(self, seconds: float) -> AgentSandboxProvider:
        """How long a claim may take to become Ready before the step fails (and the claim is deleted)."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise errors.ConfigError(f"ready_timeout must be a number of seconds > 0, got {seconds!r}")
        return self._with(ready_timeout_s=float(seconds))

    def network_policy(self, rules: models.NetworkPolicyRules | None, *, managed: bool = True) -> AgentSandboxProvider:
        """The template's NetworkPolicy: custom ``rules`` (None: the controller's secure default), or unmanaged."""
        management = models.NetworkPolicyManagement.MANAGED if managed else models.NetworkPolicyManagement.UNMANAGED
        return self._with(network_policy=rules, network_policy_management=management)

    def session_runtime(self, enabled: bool = True) -> AgentSandboxProvider:
        """The template's pods run the session runtime on 8888, ready once it answers: sandboxes for
        agent-sandbox's SDK through the Sandbox Router (``ironflow sandbox router``), not for agent
        steps, which want a pod whose first process is the idle loop (docs/agent-sandbox.md)."""
        return self._with(session_runtime=bool(enabled))

    def home_volume(self, size: str | None = "1Gi") -> AgentSandboxProvider:
        """Each sandbox's HOME on a PVC of its own (``size``; None: the pod's emptyDir): a paused
        session's files (its working directory, a git workspace) survive its pod; v1beta1 only."""
        if size is not None:
            if self.settings.api_version is not models.ApiVersion.V1BETA1:
                raise errors.ConfigError("home_volume needs agent-sandbox 1.0 (api_version v1beta1)")
            problem = quantities.quantity_problem("home_volume", size, example="1Gi")
            if problem is not None:
                raise errors.ConfigError(problem)
        return self._with(home_volume=size)

    def cluster(self, cluster: clusters.ClusterConfig) -> AgentSandboxProvider:
        """Which cluster to talk to (a :data:`~ironflow.kube.clusters.ClusterConfig`); default: the pod provider's."""
        return self._with(cluster=clusters.check_cluster(cluster, method="cluster"))

    def added_egress(self, policy: egress_policy.EgressPolicy) -> AgentSandboxProvider:
        """This provider with ``policy`` added to its pod settings' ``egress:``, for its steps' egress
        tokens (``ironflow agent --allow-host``), on its template as applied.

        Raises:
            ConfigError: the pod's own ``egress:`` opens nothing, so the template's NetworkPolicy
                never lets its pods reach the egress proxy.
        """
        own = self.settings.pod.settings.egress
        given = self._with(pod=self.settings.pod.egress(policy if own is None else own.merged(policy)))
        if sandbox_steps.network_policy(given.settings) != sandbox_steps.network_policy(self.settings):
            raise errors.ConfigError(
                "an egress option on --backend agent-sandbox adds to the pod settings' egress:, which opens "
                "nothing: the template's NetworkPolicy lets its pods reach the egress proxy only when it does "
                "(open a host there and run 'ironflow sandbox apply-template')"
            )
        return given

    @property
    def cluster_config(self) -> clusters.ClusterConfig | None:
        """The cluster steps and ``apply-template`` talk to: this provider's, else the pod provider's
        (None: the default kubeconfig or in-cluster config)."""
        return self.settings.cluster_config

    def sessions(self, *, api: kube.KubeApi | None = None) -> claim_sessions.AgentSandboxSessions:
        """This provider's sandbox sessions: a claim on its warm pool each (``api``: a connected
        client of its cluster, else the sessions connect their own)."""
        return claim_sessions.AgentSandboxSessions(self.settings, api=api)

    def account_kind(self) -> str | None:
        """As the pod provider: ``claude_subscription`` only with an auth proxy."""
        return self.settings.pod.account_kind()

    # -- loading from YAML --

    @classmethod
    def from_file(cls, path: str | Path, *, pod_settings_alone: bool = False) -> AgentSandboxProvider:
        """Load settings from YAML: ``pod:`` (the ephemeral provider's schema, ``sandboxed: true``),
        and ``template``, ``warm_pool``, ``replicas``, ``api_version``, ``ready_timeout_seconds``,
        ``network_policy`` (``default``, ``unmanaged``, or ``{ingress: [...], egress: [...]}``).

        With ``pod_settings_alone`` a file without ``pod:`` is read as the pod settings
        (``ironflow sandbox render`` and ``apply-template`` take either form).

        Raises:
            ConfigError: unreadable file, bad YAML, an unknown key (with the nearest known one), a
                wrong type; each names the key path.
        """
        data = settings_file.read(path, what="provider file")
        base = Path(path).resolve().parent  # a relative kubeconfig is taken from the file's directory
        if pod_settings_alone and "pod" not in data:
            pod = K8sEphemeralProvider.from_dict(data, base=base)
            if not pod.is_sandboxed:
                raise errors.ConfigError(
                    f"provider file '{path}' must set 'sandboxed: true': agent-sandbox pods are always hardened"
                )
            return cls(pod)
        return cls.from_dict(data, base=base)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: str | Path | None = None) -> AgentSandboxProvider:
        """Build from a mapping of settings (see :meth:`from_file`); every builder's check applies.

        ``base`` is the directory a relative ``pod.cluster.kubeconfig`` path is taken from.
        """
        top = settings_file.Section(data, known=_YAML_KEYS)
        if not isinstance(data.get("pod"), Mapping):
            raise top.error("pod", "is required: the pod settings (image, sandboxed: true, ...)")
        try:
            pod = K8sEphemeralProvider.from_dict(data["pod"], base=base)
        except errors.ConfigError as exc:
            raise top.error("pod", exc.message) from None  # the pod reader names keys inside 'pod'
        if not pod.is_sandboxed:
            raise top.error("pod", "must set 'sandboxed: true': agent-sandbox pods are always hardened")
        p = cls(pod)
        if top.has("template"):
            p = p.template(top.text("template"))
        if top.has("warm_pool") or top.has("replicas"):
            replicas = top.optional_integer("replicas")
            p = p.warm_pool(top.optional_text("warm_pool"), replicas=1 if replicas is None else replicas)
        if top.has("api_version"):
            p = p.api_version(top.text("api_version"))
        if top.has("ready_timeout_seconds"):
            p = p.ready_timeout(top.number("ready_timeout_seconds"))
        if top.has("home_volume"):
            p = p.home_volume(top.text("home_volume"))
        return _network_policy(p, top)

    # -- runtime --

    @property
    def resources(self) -> claims.Resources:
        """Where the four kinds live for this provider's API version."""
        return claims.resources(self.settings.api_version)

    async def apply_template(self, api: kube.KubeApi | None = None) -> list[apply.Applied]:
        """Create or update the SandboxTemplate and SandboxWarmPool these settings describe, after
        creating their environment claim (``environment_volume``) if it does not exist."""
        s = self.settings
        client = api if api is not None else await self.runner().api()
        kinds = {
            "PersistentVolumeClaim": kube.PERSISTENTVOLUMECLAIMS,
            "SandboxTemplate": self.resources.templates,
            "SandboxWarmPool": self.resources.pools,
        }
        return await apply.apply_objects(client, kinds, s.namespace, sandbox_steps.template_objects(s))

    def runner(
        self,
        *,
        api: kube.KubeApi | None = None,
        issuer: issuing.TokenIssuer | None = None,
        worker_env: Mapping[str, str] | None = None,
    ) -> ClaimStepRunner:
        """The I/O half: ``run``, ``release_run``, ``reap_orphans``, ``wait_for`` on a given client and
        issuer; ``api`` defaults to the provider's own client (closed by :meth:`aclose`)."""
        return ClaimStepRunner(
            self.settings, api=self._source() if api is None else api, issuer=issuer, worker_env=worker_env
        )

    async def run(self, config: steps.AgentConfig, *, logs: LogSink | None = None) -> results.AgentResult:
        """Run one step in a claimed sandbox and delete the claim (the provider's client, an admin
        client from the settings)."""
        async with ClaimStepRunner.for_settings(self.settings, self._source()) as r:
            return await r.run(config, logs=logs)

    async def release_run(self, run_id: str) -> int:
        async with ClaimStepRunner.for_settings(self.settings, self._source()) as r:
            return await r.release_run(run_id)

    async def deliver_token(self, sandbox: str, *, run_id: str | None = None) -> str:
        """Give the agent of a rendered ``ephemeral`` or ``standalone-pvc`` Sandbox its proxy token:
        issued once the pod runs, written in over exec stdin (the pattern's agent waits for it);
        returns the token's id. See :meth:`ClaimStepRunner.deliver_token`."""
        async with ClaimStepRunner.for_settings(self.settings, self._source()) as r:
            return await r.deliver_token(sandbox, run_id=run_id)

    async def aclose(self) -> None:
        """Close the API clients this provider opened on the running loop."""
        await self._connections.aclose()

    def _source(self) -> connections.ApiSource:
        return self._connections.source(self.settings.cluster_config)


def _network_policy(p: AgentSandboxProvider, top: settings_file.Section) -> AgentSandboxProvider:
    """``network_policy``: ``default``, ``unmanaged``, or custom ``ingress`` / ``egress`` rules."""
    if not top.has("network_policy"):
        return p
    policy = top.data["network_policy"]
    if isinstance(policy, Mapping):
        section = top.section("network_policy", ("ingress", "egress"))
        ingress = section.items("ingress", ("from", "ports")) if section.has("ingress") else []
        egress = section.items("egress", ("to", "ports")) if section.has("egress") else []
        custom = models.NetworkPolicyRules(tuple(dict(r.data) for r in ingress), tuple(dict(r.data) for r in egress))
        return p.network_policy(custom)
    if policy == "unmanaged":
        return p.network_policy(None, managed=False)
    if policy != "default":
        raise top.error("network_policy", "must be default, unmanaged, or {ingress: [...], egress: [...]}")
    return p
