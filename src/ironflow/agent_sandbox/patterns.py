"""The seed's agent-sandbox patterns, rendered around ironflow's hardened pod (pure).

Every pod inside a pattern is the pod :class:`~ironflow.k8s.provider.K8sEphemeralProvider`
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import errors, labels, steps
from ironflow.agent_sandbox import deliveries, manifests, models
from ironflow.claude import cli
from ironflow.k8s.provider import K8sEphemeralProvider

__all__ = [
    "DEFAULT_IMAGE",
    "IDLE_COMMAND",
    "WORKSPACE_PATH",
    "PatternOptions",
    "agent_config",
    "agent_pod_template",
    "idle_pod_template",
    "pattern_labels",
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
#: A warm sandbox waits for ``exec``; TERM ends it at once (no 30 s grace wait).
IDLE_COMMAND: Final = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
_NOW: Final = 0  # patterns carry no expiry: the clock value never reaches them
_PRIVATE_V4: Final = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16")


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
    #: Custom egress: (cidr, port or None) pairs, TCP.
    egress: tuple[tuple[str, int | None], ...] = ()
    schedule: str | None = None
    ttl_seconds_after_finished: int = 300
    extra_labels: Mapping[str, str] = field(default_factory=models.frozen_map)

    def resolved_provider(self) -> K8sEphemeralProvider:
        base = self.provider or K8sEphemeralProvider.sandboxed(self.image)
        return base.namespace(self.namespace)


def _pod(
    provider: K8sEphemeralProvider, config: steps.AgentConfig, worker_env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    objects = provider.manifests(config, now=_NOW, worker_env=worker_env or {}, pod_name="pattern")
    pods = [o for o in objects if o.get("kind") == "Pod"]
    return pods[0]


def agent_pod_template(
    provider: K8sEphemeralProvider, config: steps.AgentConfig, *, workspace: Mapping[str, Any] | None = None
) -> models.PodTemplate:
    """The provider's pod for ``config`` as a pod template (the agent runs as the container's command).

    ``workspace`` is a volume source (e.g. ``{"emptyDir": {}}``) mounted at ``/workspace``. Behind
    an auth proxy the agent first waits for its token, which ``AgentSandboxProvider.deliver_token``
    writes over exec once the pod runs (:func:`~ironflow.agent_sandbox.deliveries.token_wait_prefix`):
    the template carries the proxy's address, never a token.
    """
    pod = _pod(provider, config)
    spec = pod["spec"]
    proxy = provider.settings.auth_proxy_url
    if proxy is not None:
        main = spec["containers"][0]
        shell, script = main["command"][:-1], main["command"][-1]
        main["command"] = [*shell, deliveries.token_wait_prefix(proxy) + script]
    if workspace is not None:
        spec.setdefault("volumes", []).append({"name": "workspace", **copy.deepcopy(dict(workspace))})
        spec["containers"][0].setdefault("volumeMounts", []).append({"name": "workspace", "mountPath": WORKSPACE_PATH})
    return models.PodTemplate(spec=spec, labels=models.frozen_map(pod["metadata"].get("labels")))


def idle_pod_template(
    provider: K8sEphemeralProvider,
    *,
    workspace_vct: str | None = None,
    config: steps.AgentConfig | None = None,
    worker_env: Mapping[str, str] | None = None,
) -> models.PodTemplate:
    """The provider's hardened pod, idle: what a template and its warm pool keep ready for ``exec``.

    ``workspace_vct`` mounts the PVC of that volume claim template at ``/workspace`` (the
    controller injects the volume itself). ``worker_env`` is the worker's environment, as the
    provider's ``manifests()`` takes it (default: none, so a bypass-permissions step is refused).
    """
    pod = _pod(provider, config or steps.AgentConfig(prompt="idle"), worker_env)
    spec = pod["spec"]
    spec.pop("activeDeadlineSeconds", None)  # a pool member waits for as long as it takes
    main = spec["containers"][0]
    main["command"] = ["sh", "-c", IDLE_COMMAND]
    if workspace_vct is not None:
        main.setdefault("volumeMounts", []).append({"name": workspace_vct, "mountPath": WORKSPACE_PATH})
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
    return models.SandboxTemplate(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=idle_pod_template(opts.resolved_provider(), workspace_vct="workspace"),
        volume_claim_templates=(models.VolumeClaimTemplate("workspace", storage=opts.storage),),
        network_policy_management=management,
        network_policy=policy,
        labels=pattern_labels(opts),
    )


def standalone_pvc(opts: PatternOptions, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": opts.namespace, "labels": dict(pattern_labels(opts))},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": opts.storage}}},
    }


def render_ephemeral(opts: PatternOptions) -> list[dict[str, Any]]:
    template = agent_pod_template(opts.resolved_provider(), agent_config(opts), workspace={"emptyDir": {}})
    sandbox = models.Sandbox(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=template,
        shutdown_policy=models.ShutdownPolicy.DELETE,
        labels=pattern_labels(opts),
    )
    return [manifests.render(sandbox)]


def render_standalone(opts: PatternOptions) -> list[dict[str, Any]]:
    workspace, memory = f"{opts.name}-workspace", f"{opts.name}-memory"
    provider = opts.resolved_provider().pvc_volume(workspace, WORKSPACE_PATH).sessions_volume(memory)
    sandbox = models.Sandbox(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=agent_pod_template(provider, agent_config(opts)),
        shutdown_policy=models.ShutdownPolicy.RETAIN,
        labels=pattern_labels(opts),
    )
    return [standalone_pvc(opts, workspace), standalone_pvc(opts, memory), manifests.render(sandbox)]


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


def render_warm_pool(opts: PatternOptions) -> list[dict[str, Any]]:
    return manifests.render_all(pool_and_claim(opts, sandbox_template(opts)))


def render_network(policy: models.NetworkPolicyRules | None) -> Callable[[PatternOptions], list[dict[str, Any]]]:
    def render(opts: PatternOptions) -> list[dict[str, Any]]:
        return [manifests.render(sandbox_template(opts, policy=policy))]

    return render


def render_custom_egress(opts: PatternOptions) -> list[dict[str, Any]]:
    if not opts.egress:
        raise errors.ConfigError("network-custom-egress needs at least one --egress CIDR[:PORT]")
    rules: list[Mapping[str, Any]] = []
    for cidr, port in opts.egress:
        rule: dict[str, Any] = {"to": [{"ipBlock": {"cidr": cidr}}]}
        if port is not None:
            rule["ports"] = [{"protocol": "TCP", "port": port}]
        rules.append(rule)
    policy = models.NetworkPolicyRules(ingress=(router_ingress(),), egress=tuple(rules))
    return [manifests.render(sandbox_template(opts, policy=policy))]
