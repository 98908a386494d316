"""The agent-sandbox settings and what they render for a step (pure): template, claim, execs.

:class:`AgentSandboxSettings` is the typed value the provider builds and the runner takes;
it wraps the :class:`~ironflow.k8s.pod_provider.K8sEphemeralProvider` that describes the hardened
pod, and its properties are the only place this package reads that provider's settings. From
it come the SandboxTemplate and SandboxWarmPool (the idle hardened pod), a step's check (a step
may not change the pod: a warm pod's spec is the template's), its SandboxClaim and the execs
that deliver the token and run the agent.

Run identity comes from ``config.scope`` only (:func:`claim_labels`), never from labels. The
token reaches the sandbox only as exec stdin: never in a claim, an argv or a repr.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from ironflow import errors, labels, steps
from ironflow.agent_sandbox import deliveries, models, patterns, rendering, sandbox_environments, workspace_execs
from ironflow.claude import command, layout, profile
from ironflow.cluster import proxy_address, proxy_rules
from ironflow.egress import variables
from ironflow.k8s import hardening, step_objects
from ironflow.k8s import step_manifests as pod_manifests
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.kube import clusters
from ironflow.secrets import Secret

__all__ = [
    "DEFAULT_READY_TIMEOUT_S",
    "HOME_VOLUME",
    "TOKEN_DIR",
    "AgentSandboxSettings",
    "ExecPlan",
    "check_step",
    "claim_labels",
    "claim_manifest",
    "exec_plan",
    "network_policy",
    "template_objects",
    "template_values",
    "template_warnings",
]

DEFAULT_READY_TIMEOUT_S: Final = 120.0
#: The hardened pod's HOME volume, and the volume claim template that replaces it (``home_volume``).
HOME_VOLUME: Final = hardening.HOME_VOLUME
#: Under HOME (an emptyDir of the hardened pod): where the token and a large prompt land.
TOKEN_DIR: Final = deliveries.TOKEN_DIR
#: Written into a step's pod labels by ``AgentConfig.scoped`` (transitional): not a pod change.
_SCOPE_LABELS: Final = (labels.LABEL_RUN_ID, labels.LABEL_STEP, labels.LABEL_ROOT_RUN_ID)


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
    #: The template's pod runs the session runtime on 8888 (sandboxes for the SDK and the router).
    session_runtime: bool = False
    #: The size of each sandbox's own HOME PVC (a volume claim template): a paused session's files
    #: survive its pod (None: HOME is the hardened pod's emptyDir, gone with the pod).
    home_volume: str | None = None

    @property
    def namespace(self) -> str:
        return self.pod.settings.namespace

    @property
    def pool(self) -> str:
        return self.warm_pool or self.template

    @property
    def environment(self) -> str | None:
        """The environment claim every sandbox of the template mounts: v1alpha1 only (its claims have no
        volume claim templates); None without ``environment_volume`` or when each claim has its own."""
        if self.pod.settings.environment is None or self.own_environments:
            return None
        return patterns.environment_claim(self.template)

    @property
    def own_environments(self) -> bool:
        """Each step claims its own environment by id (v1beta1 with ``environment_volume``):
        :mod:`~ironflow.agent_sandbox.sandbox_environments`."""
        return self.pod.settings.environment is not None and self.api_version is models.ApiVersion.V1BETA1

    @property
    def cluster_config(self) -> clusters.ClusterConfig | None:
        """This provider's cluster, else the pod provider's (None: default kubeconfig or in-cluster)."""
        return self.cluster if self.cluster is not None else self.pod.settings.cluster

    @property
    def auth_proxy_url(self) -> str | None:
        return self.pod.settings.auth_proxy_url

    @property
    def auth_proxy_admin_key(self) -> Secret | None:
        return self.pod.settings.auth_proxy_admin_key

    @property
    def step_timeout_s(self) -> float:
        """How long the agent exec may run."""
        return self.pod.settings.timeout_s

    @property
    def previous_attempt_timeout_s(self) -> float:
        """How long to wait for an earlier attempt's (or a released run's) claims to be gone."""
        return self.pod.settings.previous_attempt_timeout_s

    def expires_at(self, now: int) -> int:
        """When a claim made at ``now`` expires: the pod's lifetime plus the time to become Ready."""
        return now + pod_manifests.lifetime_seconds(self.pod.settings) + int(self.ready_timeout_s)


@dataclass(frozen=True)
class ExecPlan:
    """The execs of one step, in order: ``(argv, stdin)``; the last one runs the agent."""

    deliveries: tuple[tuple[tuple[str, ...], bytes], ...]
    agent: tuple[str, ...]

    def __repr__(self) -> str:
        # stdin holds the token: show sizes only.
        sizes = [len(stdin) for _, stdin in self.deliveries]
        return f"ExecPlan(deliveries={sizes} bytes, agent={self.agent[:2]!r}...)"


# -- the template --


def template_values(s: AgentSandboxSettings) -> tuple[models.SandboxTemplate, models.SandboxWarmPool]:
    """The SandboxTemplate (the idle hardened pod) and its SandboxWarmPool."""
    managed = models.frozen_map({labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE})
    pod = patterns.idle_pod_template(
        s.pod, environment=s.environment or sandbox_environments.VOLUME, runtime=s.session_runtime
    )
    if s.own_environments:  # an emptyDir each claim's volume claim template replaces by its environment's PVC
        pod = sandbox_environments.placeholder(pod, sandbox_environments.VOLUME)
    # Named as HOME's emptyDir: the controller mounts the sandbox's PVC in its place.
    home = (models.VolumeClaimTemplate(HOME_VOLUME, storage=s.home_volume),) if s.home_volume else ()
    template = models.SandboxTemplate(
        name=s.template,
        namespace=s.namespace,
        api_version=s.api_version,
        pod_template=pod,
        volume_claim_templates=home,
        volume_claim_templates_policy=models.VolumeClaimTemplatesPolicy.ALLOWED if s.own_environments else None,
        network_policy_management=s.network_policy_management,
        network_policy=network_policy(s),
        labels=managed,
    )
    pool = models.SandboxWarmPool(
        name=s.pool,
        namespace=s.namespace,
        api_version=s.api_version,
        template=s.template,
        replicas=s.replicas,
        update_strategy=s.update_strategy,
        labels=managed,
    )
    return template, pool


def network_policy(s: AgentSandboxSettings) -> models.NetworkPolicyRules | None:
    """The template's NetworkPolicy rules: the provider's own; when its steps take egress and the
    policy is the controller's default, ingress from the router and egress to kube-dns and the
    auth proxy alone (8080, 3128), as ``ironflow manifests`` confines agents: the proxy decides
    what a step reaches, no Cilium needed (None: the controller's default)."""
    default = s.network_policy is None and s.network_policy_management in (None, models.NetworkPolicyManagement.MANAGED)
    url = s.auth_proxy_url
    if not default or url is None or not variables.opens_anything(s.pod.settings.egress):
        return s.network_policy
    rules = proxy_rules.agent_egress_rules(proxy_address.parse_proxy_address(url))
    return models.NetworkPolicyRules(ingress=(patterns.router_ingress(),), egress=tuple(rules))


def template_objects(s: AgentSandboxSettings) -> list[dict[str, Any]]:
    """The environment claim (``environment_volume``) and the conversations claim (``conversations_volume``),
    then the SandboxTemplate and SandboxWarmPool as API objects (checked and schema-validated),
    in creation order."""
    managed = {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE}
    shared = patterns.environment_pvc(s.pod, s.template, managed) if s.environment is not None else []
    claims = [*shared, *patterns.conversations_pvc(s.pod, managed)]
    return [*claims, *rendering.render_all(list(template_values(s)))]


def template_warnings(s: AgentSandboxSettings) -> tuple[str, ...]:
    """What the template allows but the steps probably cannot live with."""
    proxy = s.auth_proxy_url
    default_policy = network_policy(s) is None and s.network_policy_management in (
        None,
        models.NetworkPolicyManagement.MANAGED,
    )
    found: list[str] = []
    if proxy is not None and default_policy:
        found.append(
            f"the controller's default NetworkPolicy blocks cluster DNS and private addresses: the agent may not "
            f"reach the auth proxy at {proxy}; allow it with network_policy rules, or set the policy unmanaged "
            "and rely on ironflow's egress-profile policies"
        )
    shared = [c for c in (s.environment, s.pod.settings.conversations_claim) if c is not None]
    if shared and s.replicas > 1:
        found.append(
            f"every sandbox of the pool mounts the claims {', '.join(shared)} (ReadWriteOnce): {s.replicas} warm "
            "sandboxes can only run on one node and share their files; keep replicas at 1"
        )
    if s.own_environments and s.replicas > 0:
        found.append(
            f"with environment_volume each step claims its own environment, which cold-starts a sandbox: the "
            f"pool's {s.replicas} warm sandboxes serve only sessions; set replicas to 0 if nothing else claims them"
        )
    return tuple(found)


# -- a step --


def check_step(
    s: AgentSandboxSettings, config: steps.AgentConfig, *, worker_env: Mapping[str, str] | None = None
) -> None:
    """Refuse a step the template's pod cannot run, before anything is created.

    ``worker_env`` is the worker's environment, as the pod provider's ``manifests()`` takes
    it: ``IRONFLOW_ALLOW_BYPASS=1`` there accepts a bypass-permissions step (default: none).

    Raises:
        PromptTooLarge, ToolProfileUnsupported, StepConfigError: as the pod provider refuses;
        StepConfigError also when the step changes the pod (a warm pod's spec is the template's).
    """
    env = worker_env if worker_env is not None else {}
    resume = config.resume_environment_id
    if resume is not None and s.own_environments:
        sandbox_environments.check_id(resume)
    elif resume is not None and resume != s.environment:
        where = f"'{s.environment}'" if s.environment is not None else "none (no environment_volume)"
        raise errors.StepConfigError(
            f"agent-sandbox steps mount their template's environment, {where}, not '{resume}': run the step "
            "without resume_environment, or on --backend k8s"
        )
    if (config.continue_session or config.resume_session_id is not None) and s.pod.settings.conversations_claim is None:
        raise errors.StepConfigError(
            "continuing a conversation on agent-sandbox needs the conversations volume: set sandbox.sessions_claim in "
            "the pod settings (a PVC at ~/.claude/projects, created by 'ironflow sandbox apply-template')"
        )
    # The prompt's one refusal; it never shapes the pod here (a large one goes over exec, not a ConfigMap).
    command.validate_prompt_size(config)
    if config.workspace is not None:  # git only: cloned by an exec (agent_sandbox.workspaces), not the pod
        step_objects.refuse_workspace(config)
        step_objects.check_workspace(s.pod.settings, config)
    # The pod provider's other refusals, in its order, with this worker's bypass decision.
    step_config = config.replace(prompt="idle", workspace=None, resume_environment_id=None)
    step = patterns.idle_pod_template(s.pod, config=step_config, worker_env=env, environment=s.environment)
    base = patterns.idle_pod_template(s.pod, worker_env=env, environment=s.environment)
    step_labels = {k: v for k, v in step.labels.items() if k not in _SCOPE_LABELS}
    if step.spec != base.spec or step_labels != dict(base.labels):
        raise errors.StepConfigError(
            "the step changes the sandbox pod (pod labels, volumes, secret env, runtime class, managed "
            "settings or inputs); agent-sandbox steps run in the template's pod: set it on the provider and "
            "run 'ironflow sandbox apply-template'"
        )


def claim_labels(config: steps.AgentConfig) -> dict[str, str]:
    """A step's claim labels: its scope's run, step and root run (none outside a run), ironflow's own."""
    scope = config.scope.labels if config.scope is not None else {}
    return {
        **scope,
        labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
        labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_CLAIM,
    }


def claim_manifest(
    s: AgentSandboxSettings, config: steps.AgentConfig, *, name: str, now: int, environment: bool = False
) -> dict[str, Any]:
    """The step's SandboxClaim: scope labels, expiry annotation and ``lifecycle.shutdownTime``; with
    ``environment``, ``name`` is the environment's id and the claim mounts its PVC
    (:mod:`~ironflow.agent_sandbox.sandbox_environments`).

    The step is not validated here: :func:`check_step` does it first.
    """
    volume = s.pod.settings.environment
    own = (sandbox_environments.claim_volume(volume),) if environment and volume is not None else ()
    expires = s.expires_at(now)
    alpha = s.api_version is models.ApiVersion.V1ALPHA1
    claim = models.SandboxClaim(
        name=name,
        namespace=s.namespace,
        api_version=s.api_version,
        warm_pool=s.pool,
        template=s.template if alpha else None,
        lifecycle=models.Lifecycle(
            shutdown_time=rendering.rfc3339(datetime.fromtimestamp(expires, UTC)),
            shutdown_policy=models.ShutdownPolicy.DELETE,
        ),
        labels=models.frozen_map(claim_labels(config)),
        annotations=models.frozen_map({labels.ANNOTATION_EXPIRES_AT: str(expires)}),
        volume_claim_templates=own,
    )
    return rendering.render(claim)


def exec_plan(
    s: AgentSandboxSettings,
    config: steps.AgentConfig,
    *,
    proxy_token: Secret | None = None,
    egress_token: Secret | None = None,
    worker_env: Mapping[str, str] | None = None,
    workspace_commit: str | None = None,
) -> ExecPlan:
    """The execs of a step: token file, egress token file, prompt file (large prompts), then the agent.

    The agent's shell reads the token file into the proxy env and removes it, and the egress
    token file (a pod whose policy opens anything) into the proxy variables' password; stdin is the
    prompt file or ``/dev/null``. With a git workspace (cloned, at ``workspace_commit``) the
    agent runs in it, wrapped as a pod's step is: its processes ended, then its report.
    """
    pod = s.pod.settings
    env = worker_env or {}
    command.validate_prompt_size(config)
    args = command.build_args(config, allow_bypass=env.get(layout.ALLOW_BYPASS_ENV) == "1")
    execs: list[tuple[tuple[str, ...], bytes]] = []
    token_prefix = ""
    if proxy_token is not None:
        if s.auth_proxy_url is None:
            raise errors.ConfigError("proxy_token needs a pod provider with auth_proxy(url)")
        raw = proxy_token.reveal().encode()
        execs.append((deliveries.write_file_command(deliveries.PROXY_TOKEN_FILE, len(raw)), raw))
        token_prefix = deliveries.token_prefix(s.auth_proxy_url)
    if egress_token is not None:
        egress = deliveries.egress_prefix(pod)
        if not egress:
            raise errors.ConfigError("egress_token needs a pod provider with auth_proxy(url) and an egress policy")
        raw = egress_token.reveal().encode()
        execs.append((deliveries.write_file_command(deliveries.EGRESS_TOKEN_FILE, len(raw)), raw))
        token_prefix += egress
    stdin = "/dev/null"
    if command.prompt_via_stdin(config):
        prompt = config.prompt.encode()
        execs.append((deliveries.write_file_command("prompt", len(prompt)), prompt))
        stdin = deliveries.token_file("prompt")
    prefix = (
        f"exec <{stdin}; "
        + command.trace_prefix(config.trace_context)
        + profile.profile_copy_prefix(pod.claude_profiles)
        + token_prefix
    )
    spec = config.workspace
    working_dir = config.working_dir or (workspace_execs.WORKSPACE if spec is not None else pod.working_dir)
    shell = command.agent_shell_command(args, claude_path=pod.claude_path, working_dir=working_dir, prefix=prefix)
    if spec is not None:
        if workspace_commit is None:
            raise errors.ConfigError("a git workspace's step needs its starting commit (the clone's)")
        shell = workspace_execs.step_command(shell, spec, workspace_commit)
    return ExecPlan(tuple(execs), ("sh", "-c", shell))
