"""The seed's agent-sandbox patterns, rendered around ironflow's hardened pod (pure).

Every pod inside a pattern is the pod :class:`~ironflow.k8s.pod_provider.K8sEphemeralProvider`
renders for a step (uid 10001, read-only root, capabilities dropped, no service-account
token, egress-profile label, runtime class, managed settings, profile copy): the pattern
calls the provider's ``manifests()`` and takes the Pod's spec and labels, so the two can
never drift. A pod that waits in a warm pool runs an idle loop instead of the agent (the
provider execs the agent into it per step) and has no ``activeDeadlineSeconds``. A pod that
runs the agent itself (ephemeral, standalone-pvc) behind an auth proxy waits for its token,
delivered over exec once the pod exists: no pattern ever holds a token.

The registry of patterns by name is :mod:`~ironflow.agent_sandbox.catalog`.
"""

from __future__ import annotations

import copy
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors, labels, steps
from ironflow._renamed import renamed_names
from ironflow.agent_sandbox import deliveries, models, rendering
from ironflow.claude import cli
from ironflow.egress import addresses
from ironflow.k8s import environments, step_objects
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import egress_delivery, runtime_pod

__all__ = [
    "CONVERSATIONS_STORAGE",
    "DEFAULT_IMAGE",
    "IDLE_COMMAND",
    "WORKSPACE_PATH",
    "PatternOptions",
    "agent_config",
    "agent_pod_template",
    "conversations_pvc",
    "environment_claim",
    "environment_pvc",
    "idle_pod_template",
    "pattern_labels",
    "persistent_claim",
    "pool_and_claim",
    "render_custom_egress",
    "render_ephemeral",
    "render_network",
    "render_standalone",
    "render_warm_pool",
    "router_ingress",
    "sandbox_template",
    "secure_default_egress",
    "standalone_pvc",
]

#: The runner image built from docker/claude-runner/ (tag ``<claude-code-version>-<n>`` of its
#: IMAGE_TAG file, never ``latest``); pass ``--image`` with your registry's name.
DEFAULT_IMAGE: Final = f"ironflow-claude-runner:{cli.CLAUDE_CODE_VERSION}-1"
WORKSPACE_PATH: Final = "/workspace"
#: The size of a conversations claim ``apply-template`` creates (transcripts are small).
CONVERSATIONS_STORAGE: Final = "1Gi"
#: A warm sandbox waits for ``exec``; TERM ends it at once (no 30 s grace wait).
IDLE_COMMAND: Final = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
_NOW: Final = 0  # patterns carry no expiry: the clock value never reaches them
_PRIVATE_V4: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")
_ENVIRONMENT_SUFFIX: Final = "env"
#: Whose environment a pod template mounts when its caller names none (a KRO resource's).
_DEFAULT_ENVIRONMENT_OWNER: Final = "ironflow-agent"


@dataclass(frozen=True)
class PatternOptions:
    """Knobs of :func:`render_pattern`; ``provider`` defaults to ``K8sEphemeralProvider.sandboxed(image)``."""

    name: str = "claude-agent"
    namespace: str = "default"
    image: str = DEFAULT_IMAGE
    api_version: models.ApiVersion = models.ApiVersion.V1BETA1
    prompt: str = "Summarise the repository in /workspace."
    provider: K8sEphemeralProvider | None = None
    replicas: int = 2
    storage: str = "5Gi"
    #: Custom egress: (cidr, port or None) pairs, TCP; each excepts the fixed deny set inside it.
    egress: tuple[tuple[str, int | None], ...] = ()
    #: Ranges the custom egress rules also except (each rule the ones inside its CIDR).
    egress_except: tuple[str, ...] = ()
    schedule: str | None = None
    ttl_seconds_after_finished: int = 300
    extra_labels: Mapping[str, str] = field(default_factory=models.frozen_map)

    def resolved_provider(self) -> K8sEphemeralProvider:
        base = self.provider or K8sEphemeralProvider.sandboxed(self.image)
        return base.namespace(self.namespace)


def environment_claim(name: str) -> str:
    """The one environment claim of template or pattern ``name``: the same on every render, so a
    re-apply changes nothing, and every sandbox of the template mounts the same environment."""
    return f"{name}-{_ENVIRONMENT_SUFFIX}"


def environment_pvc(provider: K8sEphemeralProvider, name: str, labels_: Mapping[str, str]) -> list[dict[str, Any]]:
    """The environment claim of template ``name`` (none without ``environment_volume``), rendered
    to be created before the template: no expiry annotation, it lives as long as the template."""
    volume = provider.settings.environment
    if volume is None:
        return []
    claim = environments.build_environment_claim(
        environment_claim(name), namespace=provider.settings.namespace, volume=volume, pod_labels={}, expires_at=0
    )
    del claim["metadata"]["annotations"]  # never reaped: the environment outlives every claim
    claim["metadata"]["labels"] = {**labels_, **claim["metadata"]["labels"]}
    return [claim]


def _workspace_is_environment(provider: K8sEphemeralProvider) -> bool:
    """The environment volume is mounted at ``/workspace``: it is the workspace (no second mount)."""
    volume = provider.settings.environment
    return volume is not None and volume.mount_path.rstrip("/") == WORKSPACE_PATH


def _pod(
    provider: K8sEphemeralProvider,
    config: steps.AgentConfig,
    worker_env: Mapping[str, str] | None = None,
    environment: str | None = None,
) -> dict[str, Any]:
    """The provider's pod; its environment claim (if any) is ``environment``, never a random name."""
    objects = provider.manifests(
        config,
        now=_NOW,
        worker_env=worker_env or {},
        pod_name="pattern",
        environment_id=environment or environment_claim(_DEFAULT_ENVIRONMENT_OWNER),
    )
    pods = [o for o in objects if o.get("kind") == "Pod"]
    return pods[0]


def agent_pod_template(
    provider: K8sEphemeralProvider,
    config: steps.AgentConfig,
    *,
    workspace: Mapping[str, Any] | None = None,
    environment: str | None = None,
    token_wait: bool = False,
) -> models.PodTemplate:
    """The provider's pod for ``config`` as a pod template (the agent runs as the container's command).

    ``workspace`` is a volume source (e.g. ``{"emptyDir": {}}``) mounted at ``/workspace``, unless
    the environment volume is mounted there; ``environment`` names the environment claim
    (:func:`environment_claim`). With ``token_wait``, behind
    an auth proxy the agent first waits for its token, which ``AgentSandboxProvider.deliver_token``
    writes over exec once the pod runs (:func:`~ironflow.agent_sandbox.deliveries.token_wait_prefix`):
    the template carries the proxy's address, never a token.
    """
    pod = _pod(provider, config, environment=environment)
    spec = pod["spec"]
    proxy = provider.settings.auth_proxy_url
    if proxy is not None and token_wait:
        main = spec["containers"][0]
        shell, script = main["command"][:-1], main["command"][-1]
        main["command"] = [*shell, deliveries.token_wait_prefix(proxy) + script]
    if workspace is not None and not _workspace_is_environment(provider):
        spec.setdefault("volumes", []).append({"name": "workspace", **copy.deepcopy(dict(workspace))})
        spec["containers"][0].setdefault("volumeMounts", []).append({"name": "workspace", "mountPath": WORKSPACE_PATH})
    return models.PodTemplate(spec=spec, labels=models.frozen_map(pod["metadata"].get("labels")))


def idle_pod_template(
    provider: K8sEphemeralProvider,
    *,
    workspace_vct: str | None = None,
    config: steps.AgentConfig | None = None,
    worker_env: Mapping[str, str] | None = None,
    environment: str | None = None,
    runtime: bool = False,
) -> models.PodTemplate:
    """The provider's hardened pod, idle: what a template and its warm pool keep ready for ``exec``.

    With ``runtime`` its process is the session runtime on port 8888 instead, ready once it
    answers ``GET /`` (:mod:`ironflow.k8s.sessions.runtime_pod`; an image without it idles and
    never gets ready): a sandbox the SDK and the router reach over HTTP.

    ``workspace_vct`` mounts the PVC of that volume claim template at ``/workspace`` (the
    controller injects the volume itself), unless the environment volume is mounted there:
    ``environment`` names its claim (:func:`environment_claim`). ``worker_env`` is the worker's environment, as the
    provider's ``manifests()`` takes it (default: none, so a bypass-permissions step is refused).
    """
    pod = _pod(provider, config or steps.AgentConfig(prompt="idle"), worker_env, environment)
    spec = pod["spec"]
    spec.pop("activeDeadlineSeconds", None)  # a pool member waits for as long as it takes
    main = spec["containers"][0]
    main["command"] = ["sh", "-c", IDLE_COMMAND]
    if runtime:
        main["command"] = runtime_pod.main_command()
        main["ports"] = [{"name": runtime_pod.PORT_NAME, "containerPort": runtime_pod.PORT, "protocol": "TCP"}]
        main["readinessProbe"] = runtime_pod.readiness_probe()
    if workspace_vct is not None and not _workspace_is_environment(provider):
        main.setdefault("volumeMounts", []).append({"name": workspace_vct, "mountPath": WORKSPACE_PATH})
    # The egress proxy's address, never its password: a step's exec adds its token (deliveries.egress_prefix),
    # a session's the file of variables its open writes (egress_delivery).
    address = step_objects.egress_env(provider.settings, None)
    if address:
        address.update(egress_delivery.manifest_env())
        main["env"] = [*main.get("env", []), *({"name": k, "value": v} for k, v in address.items())]
    return models.PodTemplate(spec=spec, labels=models.frozen_map(pod["metadata"].get("labels")))


def router_ingress() -> dict[str, Any]:
    """Ingress from the sandbox router only (as the controller's default policy)."""
    return {
        "from": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}},
                "podSelector": {"matchLabels": {"app": "sandbox-router"}},
            }
        ]
    }


def secure_default_egress() -> dict[str, Any]:
    """The public internet minus private, link-local and ULA ranges (the controller's default egress)."""
    return {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": list(_PRIVATE_V4)}},
            {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}},
        ]
    }


def agent_config(opts: PatternOptions) -> steps.AgentConfig:
    return steps.AgentConfig(prompt=opts.prompt, working_dir=WORKSPACE_PATH)


def pattern_labels(opts: PatternOptions) -> Mapping[str, str]:
    return models.frozen_map({labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE, **opts.extra_labels})


def sandbox_template(
    opts: PatternOptions,
    *,
    policy: models.NetworkPolicyRules | None = None,
    management: models.NetworkPolicyManagement | None = models.NetworkPolicyManagement.MANAGED,
) -> models.SandboxTemplate:
    provider = opts.resolved_provider()
    own_workspace = () if _workspace_is_environment(provider) else ("workspace",)
    return models.SandboxTemplate(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=idle_pod_template(provider, workspace_vct="workspace", environment=environment_claim(opts.name)),
        volume_claim_templates=tuple(models.VolumeClaimTemplate(n, storage=opts.storage) for n in own_workspace),
        network_policy_management=management,
        network_policy=policy,
        labels=pattern_labels(opts),
    )


def persistent_claim(name: str, namespace: str, storage: str, labels_: Mapping[str, str]) -> dict[str, Any]:
    """A ReadWriteOnce PersistentVolumeClaim of the cluster's default class."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels_)},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}},
    }


def standalone_pvc(opts: PatternOptions, name: str) -> dict[str, Any]:
    return persistent_claim(name, opts.namespace, opts.storage, pattern_labels(opts))


def conversations_pvc(provider: K8sEphemeralProvider, labels_: Mapping[str, str]) -> list[dict[str, Any]]:
    """The provider's conversations claim (``~/.claude/projects``), none without ``conversations_volume``:
    what keeps Claude's conversations from one sandbox to a later one (``--continue``, ``--resume``)."""
    claim = provider.settings.conversations_claim
    if claim is None:
        return []
    return [persistent_claim(claim, provider.settings.namespace, CONVERSATIONS_STORAGE, labels_)]


def render_ephemeral(opts: PatternOptions) -> list[dict[str, Any]]:
    provider = opts.resolved_provider()
    env = environment_claim(opts.name)
    template = agent_pod_template(
        provider, agent_config(opts), workspace={"emptyDir": {}}, environment=env, token_wait=True
    )
    sandbox = models.AgentSandbox(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=template,
        shutdown_policy=models.ShutdownPolicy.DELETE,
        labels=pattern_labels(opts),
    )
    return [*environment_pvc(provider, opts.name, pattern_labels(opts)), rendering.render(sandbox)]


def render_standalone(opts: PatternOptions) -> list[dict[str, Any]]:
    workspace, memory = f"{opts.name}-workspace", f"{opts.name}-memory"
    provider = opts.resolved_provider().conversations_volume(memory)
    own = [standalone_pvc(opts, memory)]
    if not _workspace_is_environment(provider):  # else the environment claim is the workspace
        provider = provider.pvc_volume(workspace, WORKSPACE_PATH)
        own.insert(0, standalone_pvc(opts, workspace))
    sandbox = models.AgentSandbox(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=agent_pod_template(
            provider, agent_config(opts), environment=environment_claim(opts.name), token_wait=True
        ),
        shutdown_policy=models.ShutdownPolicy.RETAIN,
        labels=pattern_labels(opts),
    )
    return [*own, *environment_pvc(provider, opts.name, pattern_labels(opts)), rendering.render(sandbox)]


def pool_and_claim(opts: PatternOptions, template: models.SandboxTemplate) -> list[models.AgentSandboxObject]:
    alpha = opts.api_version is models.ApiVersion.V1ALPHA1
    pool = models.SandboxWarmPool(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        template=template.name,
        replicas=opts.replicas,
        labels=pattern_labels(opts),
    )
    claim = models.SandboxClaim(
        name=f"{opts.name}-run",
        namespace=opts.namespace,
        api_version=opts.api_version,
        warm_pool=pool.name,
        template=template.name if alpha else None,
        lifecycle=models.Lifecycle(
            ttl_seconds_after_finished=opts.ttl_seconds_after_finished, shutdown_policy=models.ShutdownPolicy.DELETE
        ),
        labels=pattern_labels(opts),
    )
    return [template, pool, claim]


def _template_environment(opts: PatternOptions) -> list[dict[str, Any]]:
    return environment_pvc(opts.resolved_provider(), opts.name, pattern_labels(opts))


def render_warm_pool(opts: PatternOptions) -> list[dict[str, Any]]:
    return [*_template_environment(opts), *rendering.render_all(pool_and_claim(opts, sandbox_template(opts)))]


def render_network(policy: models.NetworkPolicyRules | None) -> Callable[[PatternOptions], list[dict[str, Any]]]:
    def render(opts: PatternOptions) -> list[dict[str, Any]]:
        return [*_template_environment(opts), rendering.render(sandbox_template(opts, policy=policy))]

    return render


def _excepted(cidr: str, extra: tuple[str, ...]) -> list[str]:
    """An egress CIDR's ``except``: the fixed deny set and ``extra``, the ranges strictly inside it.

    ``0.0.0.0/0`` keeps private networks, metadata and loopback out; a private range a rule
    names (``10.20.0.0/16``) stays open, as the egress policy opens what a rule names.
    """
    try:
        network = ipaddress.ip_network(cidr, strict=False)  # the API takes host bits; so do we
        others = [ipaddress.ip_network(e, strict=False) for e in extra]
    except ValueError as exc:
        raise errors.ConfigError(f"invalid egress range: {exc}") from None
    found = list(addresses.fixed_deny_within(network))
    for other in others:
        inside = other.version == network.version and other != network and other.subnet_of(network)  # type: ignore[arg-type]
        if inside and not any(other.subnet_of(known) for known in found):  # type: ignore[arg-type]
            found.append(other)
    return [str(n) for n in found]


def render_custom_egress(opts: PatternOptions) -> list[dict[str, Any]]:
    if not opts.egress:
        raise errors.ConfigError("network-custom-egress needs at least one --egress CIDR[:PORT]")
    rules: list[Mapping[str, Any]] = []
    for cidr, port in opts.egress:
        block: dict[str, Any] = {"cidr": cidr}
        excepted = _excepted(cidr, opts.egress_except)
        if excepted:
            block["except"] = excepted
        rule: dict[str, Any] = {"to": [{"ipBlock": block}]}
        if port is not None:
            rule["ports"] = [{"protocol": "TCP", "port": port}]
        rules.append(rule)
    policy = models.NetworkPolicyRules(ingress=(router_ingress(),), egress=tuple(rules))
    return [*_template_environment(opts), rendering.render(sandbox_template(opts, policy=policy))]


# The old names (ironflow._renamed), for one release: a type checker reads an alias, a run warns.
if TYPE_CHECKING:
    SESSIONS_STORAGE = CONVERSATIONS_STORAGE
    sessions_pvc = conversations_pvc
else:
    __getattr__ = renamed_names(__name__)
