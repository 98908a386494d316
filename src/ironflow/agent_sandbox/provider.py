"""Run agent steps through SandboxClaims: claim, wait Ready, deliver the token, exec, parse, delete.

``AgentSandboxProvider(pod)`` takes the same :class:`~ironflow.k8s.provider.K8sEphemeralProvider`
that describes the hardened pod; the SandboxTemplate and its SandboxWarmPool are rendered
from it (:meth:`AgentSandboxProvider.template_objects`, applied by ``ironflow sandbox
apply-template``), so a warm sandbox is the very pod the ephemeral provider would create.

A step (:meth:`AgentSandboxProvider.invoke`):

1. renders and validates the step first (nothing exists before it is accepted); a step that
   would change the pod (volumes, runtime class, egress profile...) is refused: a warm pod's
   spec is fixed by the template;
2. deletes the previous attempt's claim of the same run and step, and waits until it is gone;
3. creates a SandboxClaim (run/step labels, ``ironflow.io/expires-at``, ``lifecycle.shutdownTime``
   at the same moment, shutdownPolicy Delete) and waits for Ready on the shared claim watch;
4. only then issues the auth-proxy token and writes it into the sandbox over exec (stdin, file
   mode 0600 under ``$HOME/.ironflow``): never into the claim, whose env would force a cold start
   and is readable by anyone who can read claims; a large prompt goes the same way;
5. execs the agent (the same ``claude`` command line as every sandbox), parses its output;
6. always: revokes the token and deletes the claim (the Sandbox and pod follow by cascade),
   shielded from cancellation.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from ironflow import errors, labels, steps
from ironflow.agent_sandbox import apply, claims, manifests, models, patterns
from ironflow.claude import command, layout, profile
from ironflow.k8s import manifests as pod_manifests
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube import api as kube
from ironflow.kube import clusters, connections
from ironflow.provider import LogSink, ProviderBase
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow.agent_sandbox.runner import SandboxStepRunner

__all__ = [
    "DEFAULT_READY_TIMEOUT_S",
    "TOKEN_DIR",
    "AgentSandboxProvider",
    "AgentSandboxSettings",
    "ExecPlan",
]

_log = logging.getLogger(__name__)

DEFAULT_READY_TIMEOUT_S: Final = 120.0
#: Under HOME (an emptyDir of the hardened pod): where the token and a large prompt land.
TOKEN_DIR: Final = ".ironflow"  # noqa: S105 - a directory name
_RUN_LABELS: Final = (labels.LABEL_RUN_ID, labels.LABEL_STEP, labels.LABEL_ROOT_RUN_ID)
_YAML_KEYS: Final = (
    "pod",
    "template",
    "warm_pool",
    "replicas",
    "api_version",
    "ready_timeout_seconds",
    "network_policy",
)


@dataclass(frozen=True)
class AgentSandboxSettings:
    """The provider's settings; the pod itself is ``pod``'s (image, hardening, proxy, profiles...)."""

    pod: K8sEphemeralProvider
    template: str = "ironflow-agent"
    #: The pool claims name (v1beta1 ``warmPoolRef``; v1alpha1 ``warmpool`` policy); default: the template's name.
    warm_pool: str | None = None
    replicas: int = 1
    api_version: models.ApiVersion = models.ApiVersion.V1BETA1
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    update_strategy: models.UpdateStrategy | None = models.UpdateStrategy.RECREATE
    network_policy_management: models.NetworkPolicyManagement | None = None
    network_policy: models.NetworkPolicyRules | None = None
    cluster: clusters.ClusterConfig | None = field(default=None, repr=False)

    @property
    def namespace(self) -> str:
        return self.pod.settings.namespace

    @property
    def pool(self) -> str:
        return self.warm_pool or self.template


@dataclass(frozen=True)
class ExecPlan:
    """The execs of one step, in order: ``(argv, stdin)``; the last one runs the agent."""

    deliveries: tuple[tuple[tuple[str, ...], bytes], ...]
    agent: tuple[str, ...]

    def __repr__(self) -> str:
        # stdin holds the token: show sizes only.
        sizes = [len(stdin) for _, stdin in self.deliveries]
        return f"ExecPlan(deliveries={sizes} bytes, agent={self.agent[:2]!r}...)"


def _write_file_command(name: str, size: int) -> tuple[str, ...]:
    """Read exactly ``size`` bytes of stdin into ``$HOME/.ironflow/<name>`` (0600); v4 exec has no EOF."""
    target = f'"$HOME/{TOKEN_DIR}/{name}"'
    script = f'umask 077 && mkdir -p "$HOME/{TOKEN_DIR}" && head -c {size} > {target}.part && mv {target}.part {target}'
    return ("sh", "-c", script)


@dataclass(frozen=True, init=False)
class AgentSandboxProvider(ProviderBase):
    """Agent steps in agent-sandbox sandboxes: one SandboxClaim per step, warm when the pool has one.

    >>> p = AgentSandboxProvider(K8sEphemeralProvider.sandboxed("ghcr.io/acme/runner:1").namespace("agents"))
    >>> p.settings.namespace, p.settings.pool, [o["kind"] for o in p.template_objects()]
    ('agents', 'ironflow-agent', ['SandboxTemplate', 'SandboxWarmPool'])
    """

    settings: AgentSandboxSettings

    def __init__(self, pod: K8sEphemeralProvider | AgentSandboxSettings) -> None:
        settings = pod if isinstance(pod, AgentSandboxSettings) else AgentSandboxSettings(pod=pod)
        if not settings.pod.is_sandboxed:
            raise errors.ConfigError(
                "AgentSandboxProvider needs the hardened pod: build it with K8sEphemeralProvider.sandboxed(image)"
            )
        object.__setattr__(self, "settings", settings)

    def _with(self, **changes: Any) -> AgentSandboxProvider:
        return AgentSandboxProvider(dataclasses.replace(self.settings, **changes))

    # -- builders --

    def namespace(self, namespace: str) -> AgentSandboxProvider:
        """Where claims, the template and the pool live (the pod provider's namespace)."""
        return self._with(pod=self.settings.pod.namespace(namespace))

    def template(self, name: str) -> AgentSandboxProvider:
        """The SandboxTemplate (and default pool) name."""
        manifests.check(models.SandboxWarmPool(name=name, template=name))
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

    def cluster(self, cluster: clusters.ClusterConfig) -> AgentSandboxProvider:
        """Which cluster to talk to (a :data:`~ironflow.kube.clusters.ClusterConfig`); default: the pod provider's."""
        return self._with(cluster=clusters.check_cluster(cluster, method="cluster"))

    @property
    def cluster_config(self) -> clusters.ClusterConfig | None:
        """The cluster steps and ``apply-template`` talk to: this provider's, else the pod provider's
        (None: the default kubeconfig or in-cluster config)."""
        return self.settings.cluster if self.settings.cluster is not None else self.settings.pod.settings.cluster

    def account_kind(self) -> str | None:
        """As the pod provider: ``claude_subscription`` only with an auth proxy."""
        return self.settings.pod.account_kind()

    # -- loading from YAML --

    @classmethod
    def from_file(cls, path: str | Path) -> AgentSandboxProvider:
        """Load settings from YAML: ``pod:`` (the ephemeral provider's schema, ``sandboxed: true``),
        and ``template``, ``warm_pool``, ``replicas``, ``api_version``, ``ready_timeout_seconds``,
        ``network_policy`` (``default``, ``unmanaged``, or ``{ingress: [...], egress: [...]}``).

        Raises:
            ConfigError: unreadable file, bad YAML, an unknown key (named), a wrong type.
        """
        try:
            data = yaml.safe_load(Path(path).read_text())
        except OSError as exc:
            raise errors.ConfigError(f"cannot read provider file '{path}': {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise errors.ConfigError(f"provider file '{path}' is not valid YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, Mapping):
            raise errors.ConfigError(f"provider file '{path}' must hold a mapping of settings")
        return cls.from_dict(data, base=Path(path).parent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, base: str | Path | None = None) -> AgentSandboxProvider:
        """Build from a mapping of settings (see :meth:`from_file`); every builder's check applies.

        ``base`` is the directory a relative ``pod.cluster.kubeconfig`` path is taken from.
        """
        unknown = sorted(set(data) - set(_YAML_KEYS))
        if unknown:
            raise errors.ConfigError(f"unknown setting '{unknown[0]}'; known: {', '.join(_YAML_KEYS)}")
        if not isinstance(data.get("pod"), Mapping):
            raise errors.ConfigError("setting 'pod' is required: the pod settings (image, sandboxed: true, ...)")
        pod = K8sEphemeralProvider.from_dict(data["pod"], base=base)
        if not pod.is_sandboxed:
            raise errors.ConfigError("setting 'pod' must set 'sandboxed: true': agent-sandbox pods are always hardened")
        p = cls(pod)

        def typed(key: str, kind: type | tuple[type, ...], what: str) -> Any:
            value = data[key]
            if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
                raise errors.ConfigError(f"setting '{key}' must be {what}, got {type(value).__name__}")
            return value

        if data.get("template") is not None:
            p = p.template(typed("template", str, "a string"))
        if data.get("warm_pool") is not None or data.get("replicas") is not None:
            pool = typed("warm_pool", str, "a string") if data.get("warm_pool") is not None else None
            replicas = typed("replicas", int, "an integer") if data.get("replicas") is not None else 1
            p = p.warm_pool(pool, replicas=replicas)
        if data.get("api_version") is not None:
            p = p.api_version(typed("api_version", str, "v1alpha1 or v1beta1"))
        if data.get("ready_timeout_seconds") is not None:
            p = p.ready_timeout(typed("ready_timeout_seconds", (int, float), "a number"))
        policy = data.get("network_policy")
        if policy == "unmanaged":
            p = p.network_policy(None, managed=False)
        elif isinstance(policy, Mapping):
            extra = sorted(set(policy) - {"ingress", "egress"})
            if extra or not all(isinstance(policy.get(k, []), list) for k in ("ingress", "egress")):
                raise errors.ConfigError("setting 'network_policy' takes lists 'ingress' and 'egress' only")
            rules = models.NetworkPolicyRules(tuple(policy.get("ingress", [])), tuple(policy.get("egress", [])))
            p = p.network_policy(rules)
        elif policy not in (None, "default"):
            raise errors.ConfigError("setting 'network_policy' must be default, unmanaged, or {ingress, egress}")
        return p

    def template_warnings(self) -> tuple[str, ...]:
        """What the template allows but the steps probably cannot live with (pure)."""
        s = self.settings
        proxy = s.pod.settings.auth_proxy_url
        default_policy = s.network_policy is None and s.network_policy_management in (
            None,
            models.NetworkPolicyManagement.MANAGED,
        )
        if proxy is not None and default_policy:
            return (
                f"the controller's default NetworkPolicy blocks cluster DNS and private addresses: the agent may not "
                f"reach the auth proxy at {proxy}; allow it with network_policy rules, or set the policy unmanaged "
                "and rely on ironflow's egress-profile policies",
            )
        return ()

    # -- pure rendering --

    @property
    def resources(self) -> claims.Resources:
        return claims.resources(self.settings.api_version)

    def template_values(self) -> tuple[models.SandboxTemplate, models.SandboxWarmPool]:
        """The SandboxTemplate (the idle hardened pod) and its SandboxWarmPool."""
        s = self.settings
        managed = {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE}
        template = models.SandboxTemplate(
            name=s.template,
            namespace=s.namespace,
            api_version=s.api_version,
            pod_template=patterns.idle_pod_template(s.pod),
            network_policy_management=s.network_policy_management,
            network_policy=s.network_policy,
            labels=models.frozen_map(managed),
        )
        pool = models.SandboxWarmPool(
            name=s.pool,
            namespace=s.namespace,
            api_version=s.api_version,
            template=s.template,
            replicas=s.replicas,
            update_strategy=s.update_strategy,
            labels=models.frozen_map(managed),
        )
        return template, pool

    def template_objects(self) -> list[dict[str, Any]]:
        """The SandboxTemplate and SandboxWarmPool as API objects (checked and schema-validated)."""
        return manifests.render_all(list(self.template_values()))

    async def apply_template(self, api: kube.KubeApi | None = None) -> list[apply.Applied]:
        """Create or update the SandboxTemplate and SandboxWarmPool these settings describe."""
        client = api if api is not None else await self.connect()
        res = self.resources
        kinds = {"SandboxTemplate": res.templates, "SandboxWarmPool": res.pools}
        return await apply.apply_objects(client, kinds, self.settings.namespace, self.template_objects())

    def check_step(self, config: steps.AgentConfig, *, worker_env: Mapping[str, str] | None = None) -> None:
        """Refuse a step the provider's pod cannot run, before anything is created.

        ``worker_env`` is the worker's environment, as the pod provider's ``manifests()`` takes
        it: ``IRONFLOW_ALLOW_BYPASS=1`` there accepts a bypass-permissions step (default: none).

        Raises:
            PromptTooLarge, ToolProfileUnsupported, StepConfigError: as the pod provider refuses;
            StepConfigError also when the step changes the pod (a warm pod's spec is the template's).
        """
        env = worker_env if worker_env is not None else {}
        # The prompt's one refusal; it never shapes the pod here (a large one goes over exec, not a ConfigMap).
        command.validate_prompt_size(config)
        # The pod provider's other refusals, in its order, with this worker's bypass decision.
        step = patterns.idle_pod_template(self.settings.pod, config=config.replace(prompt="idle"), worker_env=env)
        base = patterns.idle_pod_template(self.settings.pod, worker_env=env)
        step_labels = {k: v for k, v in step.labels.items() if k not in _RUN_LABELS}
        if step.spec != base.spec or step_labels != dict(base.labels):
            raise errors.StepConfigError(
                "the step changes the sandbox pod (pod labels, volumes, secret env, runtime class, managed "
                "settings or inputs); agent-sandbox steps run in the template's pod: set it on the provider and "
                "run 'ironflow sandbox apply-template'"
            )

    def run_labels(self, config: steps.AgentConfig) -> dict[str, str]:
        """The run labels (run id, step, root run id) the step's pod and claim carry (pure)."""
        pod_labels = {**self.settings.pod.settings.pod_labels, **config.pod_labels}
        return {k: pod_labels[k] for k in _RUN_LABELS if k in pod_labels}

    def claim_manifest(self, config: steps.AgentConfig, *, name: str, now: int) -> dict[str, Any]:
        """The step's SandboxClaim: run/step labels, expiry annotation and ``lifecycle.shutdownTime`` (pure).

        The step is not validated here: :meth:`check_step` does it first.
        """
        s = self.settings
        claim_labels = self.run_labels(config)
        claim_labels[labels.LABEL_MANAGED_BY] = labels.MANAGED_BY_VALUE
        claim_labels[labels.LABEL_COMPONENT] = labels.COMPONENT_SANDBOX_CLAIM
        expires = now + pod_manifests.lifetime_seconds(s.pod.settings) + int(s.ready_timeout_s)
        alpha = s.api_version is models.ApiVersion.V1ALPHA1
        claim = models.SandboxClaim(
            name=name,
            namespace=s.namespace,
            api_version=s.api_version,
            warm_pool=s.pool,
            template=s.template if alpha else None,
            lifecycle=models.Lifecycle(
                shutdown_time=manifests.rfc3339(datetime.fromtimestamp(expires, UTC)),
                shutdown_policy=models.ShutdownPolicy.DELETE,
            ),
            labels=models.frozen_map(claim_labels),
            annotations=models.frozen_map({labels.ANNOTATION_EXPIRES_AT: str(expires)}),
        )
        return manifests.render(claim)

    def exec_plan(
        self,
        config: steps.AgentConfig,
        *,
        proxy_token: Secret | None = None,
        worker_env: Mapping[str, str] | None = None,
    ) -> ExecPlan:
        """The execs of a step (pure): token file, prompt file (large prompts), then the agent.

        The agent's shell reads the token file into ``ANTHROPIC_AUTH_TOKEN`` and removes it, so the
        token lives only in the agent's environment; stdin is the prompt file or ``/dev/null``.
        """
        s = self.settings.pod.settings
        env = worker_env or {}
        command.validate_prompt_size(config)
        args = command.build_args(config, allow_bypass=env.get(layout.ALLOW_BYPASS_ENV) == "1")
        deliveries: list[tuple[tuple[str, ...], bytes]] = []
        token_prefix = ""
        if proxy_token is not None:
            if s.auth_proxy_url is None:
                raise errors.ConfigError("proxy_token needs a pod provider with auth_proxy(url)")
            raw = proxy_token.reveal().encode()
            deliveries.append((_write_file_command("proxy-token", len(raw)), raw))
            file = f'"$HOME/{TOKEN_DIR}/proxy-token"'
            token_prefix = (
                f'ANTHROPIC_AUTH_TOKEN="$(cat {file})" && rm -f {file} && '
                f"export ANTHROPIC_AUTH_TOKEN ANTHROPIC_BASE_URL={command.shell_quote(s.auth_proxy_url)} "
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 && "
            )
        stdin = "/dev/null"
        if command.prompt_via_stdin(config):
            prompt = config.prompt.encode()
            deliveries.append((_write_file_command("prompt", len(prompt)), prompt))
            stdin = f'"$HOME/{TOKEN_DIR}/prompt"'
        prefix = (
            f"exec <{stdin}; "
            + command.trace_prefix(config.trace_context)
            + profile.profile_copy_prefix(s.claude_profiles)
            + token_prefix
        )
        shell = command.agent_shell_command(
            args, claude_path=s.claude_path, working_dir=config.working_dir or s.working_dir, prefix=prefix
        )
        return ExecPlan(tuple(deliveries), ("sh", "-c", shell))

    # -- runtime --

    async def connect(self) -> kube.KubeApi:
        """The process's shared API client for this provider's cluster (one per cluster and event loop)."""
        return await connections.SHARED.get(self.cluster_config)

    def runner(
        self, *, api: kube.KubeApi | None = None, issuer: Any = None, worker_env: Mapping[str, str] | None = None
    ) -> SandboxStepRunner:
        """The I/O half: ``invoke``, ``release_run``, ``reap_orphans``, ``wait_for`` on a given client and issuer."""
        from ironflow.agent_sandbox.runner import SandboxStepRunner

        return SandboxStepRunner(self, api=api, issuer=issuer, worker_env=worker_env)

    async def run(self, config: steps.AgentConfig, *, logs: LogSink | None = None) -> steps.AgentResult:
        """Run one step in a claimed sandbox and delete the claim (shared client, admin client from settings)."""
        async with self._default_runner() as r:
            return await r.run(config, logs=logs)

    async def release_run(self, run_id: str) -> int:
        async with self._default_runner() as r:
            return await r.release_run(run_id)

    def _default_runner(self) -> SandboxStepRunner:
        from ironflow.agent_sandbox.runner import SandboxStepRunner

        issuer = None
        pod = self.settings.pod.settings
        if pod.auth_proxy_url is not None:
            from ironflow.auth_proxy.client import AdminClient

            issuer = AdminClient(pod.auth_proxy_url, pod.auth_proxy_admin_key)
        return SandboxStepRunner(self, api=None, issuer=issuer, worker_env=None, owns_issuer=issuer is not None)
