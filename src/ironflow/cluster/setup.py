"""What a cluster administrator applies once for ironflow, for one configuration (pure).

The agent namespace (Pod Security ``restricted`` enforced), the worker's RBAC (the
least the runtime needs, nothing on NetworkPolicies or Secrets), a default deny, egress
openings (Cilium FQDN rules, or plain NetworkPolicies), the gVisor RuntimeClass, and the
managed-settings preset ConfigMaps. ``ironflow manifests`` prints :func:`render`;
``examples/k8s/sandbox/`` is :func:`ironflow.cluster.examples.example_files` written out by
``scripts/render-examples``, and unit tests keep the two identical.

Never talks to a cluster and never reads files: a Claude profile arrives as a mapping of
relative paths to contents. Every function returns fresh dicts.

Worker permissions (``WORKER_PERMISSIONS``; a test compares the Role with this table):

==========================  ====================================  =================================
resource                    verbs                                 used by
==========================  ====================================  =================================
pods                        create get list watch delete          launch, wait, release_run, reaper,
                                                                  JobRun's pod lookup
pods/log                    get                                   reading the agent's output
pods/exec                   create get                            PodRun stdin, written into the pod's
                                                                  FIFO (websocket upgrades use GET)
events                      list                                  why a step's pod cannot start
configmaps                  create get list delete                prompt ConfigMaps, cleanup, reaper
batch/jobs                  create get list watch delete          JobRun, release_run, reaper
persistentvolumeclaims      create get list patch delete          environment claims (opt-in only)
persistentvolumeclaims,     create get list patch delete          sessions' HOME claims and their
snapshot.storage.k8s.io/                                          VolumeSnapshots (opt-in only)
volumesnapshots
==========================  ====================================  =================================

``ironflow check`` gets its own ServiceAccount and Role (pods get/list, pods/exec create,
SubjectAccessReview create). The worker's exec is for ``PodRun.stdin`` only (RBAC cannot name the
pods, which are made per run: the Role is the agent namespace's, no attach, no port-forward); with
the agent-sandbox backend, its Role (``AGENT_SANDBOX_PERMISSIONS``, opt-in) grants the claims,
the Sandbox lookup and the execs that backend runs. The proxy's and the worker's Deployments
are :mod:`ironflow.cluster.workloads`, opt-in too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow import errors, labels
from ironflow.claude import layout
from ironflow.cluster import (
    claude_settings,
    documents,
    network,
    proxy_address,
    sandbox_router,
    service_network,
    session_network,
    workloads,
)
from ironflow.cluster.network import EgressProfile

__all__ = [
    "AGENTS_NAMESPACE",
    "AGENT_SANDBOX_PERMISSIONS",
    "AUTH_PROXY_NAME",
    "AUTH_PROXY_PORT",
    "CHECK_PERMISSIONS",
    "CHECK_SERVICE_ACCOUNT",
    "DEFAULT_AUTH_PROXY_URL",
    "ENVIRONMENT_PERMISSIONS",
    "GVISOR_RUNTIME_CLASS",
    "MANAGED_SETTINGS_PRESETS",
    "SESSION_VOLUME_PERMISSIONS",
    "WORKER_NAMESPACE",
    "WORKER_PERMISSIONS",
    "WORKER_SERVICE_ACCOUNT",
    "ClusterSetup",
    "EgressProfile",
    "Permission",
    "preset_configmap_name",
    "profile_configmap_name",
    "profile_configmaps",
    "proxy_namespace_from_url",
    "render",
    "render_documents",
]

AGENTS_NAMESPACE: Final = "ironflow-agents"
WORKER_NAMESPACE: Final = "ironflow"
WORKER_SERVICE_ACCOUNT: Final = "ironflow-worker"
CHECK_SERVICE_ACCOUNT: Final = "ironflow-check"
AUTH_PROXY_NAME: Final = network.AUTH_PROXY_NAME
AUTH_PROXY_PORT: Final = network.AUTH_PROXY_PORT
DEFAULT_AUTH_PROXY_URL: Final = "http://ironflow-auth-proxy.ironflow-system"
GVISOR_RUNTIME_CLASS: Final = "gvisor"


@dataclass(frozen=True)
class Permission:
    """One Role rule and the reason the runtime needs it."""

    api_group: str
    resource: str
    verbs: tuple[str, ...]
    why: str

    def rule(self) -> dict[str, Any]:
        return {"apiGroups": [self.api_group], "resources": [self.resource], "verbs": list(self.verbs)}


WORKER_PERMISSIONS: Final = (
    Permission("", "pods", ("create", "get", "list", "watch", "delete"), "launch, wait, release_run, reaper"),
    Permission("", "pods/log", ("get",), "read the agent's output"),
    Permission("", "pods/exec", ("create", "get"), "PodRun stdin into the pod's FIFO (websocket upgrades use GET)"),
    Permission("", "events", ("list",), "say why a step's pod cannot start"),
    Permission("", "configmaps", ("create", "get", "list", "delete"), "prompt ConfigMaps, cleanup, reaper"),
    Permission("batch", "jobs", ("create", "get", "list", "watch", "delete"), "JobRun, release_run, reaper"),
)
ENVIRONMENT_PERMISSIONS: Final = (
    Permission(
        "", "persistentvolumeclaims", ("create", "get", "list", "patch", "delete"), "persistent environment claims"
    ),
)
#: Sessions with a session volume: a HOME claim each, snapshots and forks as VolumeSnapshots.
SESSION_VOLUME_PERMISSIONS: Final = (
    Permission(
        "", "persistentvolumeclaims", ("create", "get", "list", "patch", "delete"), "sessions' HOME claims, reaper"
    ),
    Permission(
        "snapshot.storage.k8s.io", "volumesnapshots", ("create", "get", "delete"), "session snapshots and forks"
    ),
)
#: The agent-sandbox backend (docs/agent-sandbox.md, "RBAC for the worker").
AGENT_SANDBOX_PERMISSIONS: Final = (
    Permission(
        "extensions.agents.x-k8s.io",
        "sandboxclaims",
        ("create", "get", "list", "watch", "delete"),
        "one claim per step, the shared watch, cleanup, reaping",
    ),
    Permission("agents.x-k8s.io", "sandboxes", ("get",), "the pod name of the bound Sandbox"),
    Permission("", "pods/exec", ("create", "get"), "token, prompt and agent execs (websocket upgrades use GET)"),
    Permission(
        "extensions.agents.x-k8s.io", "sandboxtemplates", ("get", "create", "patch"), "`sandbox apply-template`"
    ),
    Permission(
        "extensions.agents.x-k8s.io", "sandboxwarmpools", ("get", "create", "patch"), "`sandbox apply-template`"
    ),
)
CHECK_PERMISSIONS: Final = (
    Permission("", "pods", ("get", "list"), "find the agent pods to inspect"),
    Permission(
        "",
        "pods/exec",
        ("create", "get"),
        "probe the root filesystem, the SA token and egress from inside (websocket upgrades use GET)",
    ),
)

MANAGED_SETTINGS_PRESETS: Final = claude_settings.MANAGED_SETTINGS_PRESETS
preset_configmap_name = claude_settings.preset_configmap_name
profile_configmap_name = claude_settings.profile_configmap_name
profile_configmaps = claude_settings.profile_configmaps


@dataclass(frozen=True)
class ClusterSetup:
    """Which manifests to render, and with which names."""

    namespace: str = AGENTS_NAMESPACE
    worker_namespace: str = WORKER_NAMESPACE
    worker_service_account: str = WORKER_SERVICE_ACCOUNT
    #: The proxy's in-cluster URL; its host names the namespace (``<service>.<namespace>``).
    auth_proxy_url: str | None = None
    cilium: bool = False
    gvisor: bool = False
    presets: tuple[str, ...] = ("locked", "readonly")
    egress_profiles: tuple[EgressProfile, ...] = field(
        default_factory=lambda: (EgressProfile("gitlab", ("gitlab.com",)),)
    )
    #: Grant the PVC verbs persistent environment claims need.
    environment_claims: bool = False
    #: Grant the verbs of sessions' HOME claims and their VolumeSnapshots.
    session_volumes: bool = False
    #: Add the ServiceAccount and Roles ``ironflow check`` runs with.
    check_rbac: bool = False
    #: Grant the worker what the agent-sandbox backend does (claims, execs).
    agent_sandbox_rbac: bool = False
    #: Render the proxy's Deployment and Service (needs ``auth_proxy_url``).
    auth_proxy_deployment: workloads.AuthProxyDeployment | None = None
    #: Render the worker's Deployment and provider file.
    worker_deployment: workloads.WorkerDeployment | None = None
    #: Render the in-cluster Sandbox Router (:mod:`ironflow.cluster.sandbox_router`).
    sandbox_router: sandbox_router.SandboxRouterDeployment | None = None

    def __post_init__(self) -> None:
        for name, value in (("namespace", self.namespace), ("worker namespace", self.worker_namespace)):
            if not labels.is_dns_label(value):
                raise errors.ConfigError(f"{name} '{value}' is not a DNS label (lower-case letters, digits, '-')")
        if not labels.is_dns_label(self.worker_service_account):
            raise errors.ConfigError(f"worker service account '{self.worker_service_account}' is not a DNS label")
        if self.auth_proxy_url is not None:
            address = proxy_address.parse_proxy_address(self.auth_proxy_url)
            if self.auth_proxy_deployment is not None:
                proxy_address.parse_proxy_url(self.auth_proxy_url)  # the Deployment needs a Service
            problem = address.plain_policy_problem() if isinstance(address, proxy_address.ExternalProxy) else None
            if problem is not None and not self.cilium:
                raise errors.ConfigError(problem)
        elif self.auth_proxy_deployment is not None:
            raise errors.ConfigError(
                "the auth proxy's Deployment needs its URL (--auth-proxy http://<service>.<namespace>): "
                "the Service's name, namespace and port come from it"
            )
        names = [p.name for p in self.egress_profiles]
        for label, values in (("managed settings preset", list(self.presets)), ("egress profile", names)):
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:
                raise errors.ConfigError(f"{label} '{repeated[0]}' is given twice: name each once")
        for preset in self.presets:
            if preset not in MANAGED_SETTINGS_PRESETS:
                known = ", ".join(sorted(MANAGED_SETTINGS_PRESETS))
                raise errors.ConfigError(f"unknown managed settings preset '{preset}', known presets: [{known}]")

    @property
    def auth_proxy(self) -> proxy_address.ProxyAddress | None:
        return None if self.auth_proxy_url is None else proxy_address.parse_proxy_address(self.auth_proxy_url)

    @property
    def auth_proxy_namespace(self) -> str | None:
        """The proxy's own namespace, rendered here; None without a proxy or for one outside the cluster."""
        proxy = self.auth_proxy
        return proxy.namespace if isinstance(proxy, proxy_address.ProxyService) else None


def proxy_namespace_from_url(url: str) -> str:
    """The namespace of an in-cluster proxy URL ``http(s)://<service>.<namespace>[.svc...]``.

    >>> proxy_namespace_from_url("http://ironflow-auth-proxy.ironflow-system")
    'ironflow-system'
    """
    return proxy_address.parse_proxy_url(url).namespace


# --- objects ------------------------------------------------------------------------------


def _meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta.update(extra)
    return meta


def _namespace(name: str, enforce: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": _meta(
            name,
            labels={
                "pod-security.kubernetes.io/enforce": enforce,
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        ),
    }


def namespaces(config: ClusterSetup) -> list[documents.Document]:
    docs = [
        documents.Document(
            _namespace(config.namespace, "restricted"),
            "Agent pods. Pod Security `restricted` is enforced: a pod that is not\n"
            "non-root, seccomp RuntimeDefault and capability-free is refused.",
        ),
        documents.Document(
            _namespace(config.worker_namespace, "baseline"),
            "The worker (your deployment, running as ServiceAccount "
            f"{config.worker_service_account}).\n"
            "`baseline` is enforced and `restricted` only warned: the worker is your pod.",
        ),
    ]
    if config.auth_proxy_namespace is not None:
        docs.append(
            documents.Document(
                _namespace(config.auth_proxy_namespace, "restricted"),
                "The auth proxy, which alone holds the Claude credential (auth-proxy.yaml).",
            )
        )
    return docs


def _role(name: str, namespace: str, permissions: tuple[Permission, ...]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(name, namespace),
        "rules": [p.rule() for p in permissions],
    }


def _binding(kind: str, name: str, namespace: str | None, sa: str, sa_namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": _meta(name, namespace),
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
    }


def _service_account(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace)}


def topology(config: ClusterSetup) -> network.Topology:
    return network.Topology(config.namespace, config.worker_namespace, config.auth_proxy, config.egress_profiles)


def worker_permissions(config: ClusterSetup) -> tuple[Permission, ...]:
    return (
        WORKER_PERMISSIONS
        + (ENVIRONMENT_PERMISSIONS if config.environment_claims else ())
        + (SESSION_VOLUME_PERMISSIONS if config.session_volumes else ())
    )


def worker_rbac(config: ClusterSetup) -> list[documents.Document]:
    sa, sa_ns = config.worker_service_account, config.worker_namespace
    table = "\n".join(f"  {p.resource}: {', '.join(p.verbs)} ({p.why})" for p in worker_permissions(config))
    return [
        documents.Document(
            _service_account(sa, sa_ns), "The worker's identity: the only account that creates agent pods."
        ),
        documents.Document(
            _role(sa, config.namespace, worker_permissions(config)),
            "What the runtime does in the agent namespace, and nothing else:\n"
            f"{table}\n"
            "No access to Secrets (pods only carry secretKeyRef), NetworkPolicies, attach or port-forward.",
        ),
        documents.Document(_binding("Role", sa, config.namespace, sa, sa_ns)),
    ]


def check_rbac(config: ClusterSetup) -> list[documents.Document]:
    sa, sa_ns = CHECK_SERVICE_ACCOUNT, config.worker_namespace
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": _meta(CHECK_SERVICE_ACCOUNT),
        "rules": [{"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}],
    }
    return [
        documents.Document(
            _service_account(sa, sa_ns),
            "Optional: the account `ironflow check` runs with, kept apart from the worker\n"
            "because it needs pods/exec. Not in kustomization.yaml: apply it when needed.",
        ),
        documents.Document(_role(sa, config.namespace, CHECK_PERMISSIONS)),
        documents.Document(_binding("Role", sa, config.namespace, sa, sa_ns)),
        documents.Document(cluster_role, "Asks the API server whether the worker could create NetworkPolicies."),
        documents.Document(_binding("ClusterRole", sa, None, sa, sa_ns)),
    ]


def agent_sandbox_rbac(config: ClusterSetup) -> list[documents.Document]:
    name, sa, sa_ns = (
        f"{config.worker_service_account}-agent-sandbox",
        config.worker_service_account,
        config.worker_namespace,
    )
    table = "\n".join(f"  {p.resource}: {', '.join(p.verbs)} ({p.why})" for p in AGENT_SANDBOX_PERMISSIONS)
    return [
        documents.Document(
            _role(name, config.namespace, AGENT_SANDBOX_PERMISSIONS),
            "Optional: what the agent-sandbox backend does in the agent namespace. It execs the\n"
            f"token, the prompt and the agent into claimed pods, hence pods/exec:\n{table}",
        ),
        documents.Document(_binding("Role", name, config.namespace, sa, sa_ns)),
    ]


def workloads_documents(config: ClusterSetup) -> list[documents.Document]:
    """The proxy's, the worker's and the sandbox router's Deployments, when asked for."""
    docs: list[documents.Document] = []
    proxy = config.auth_proxy
    if config.auth_proxy_deployment is not None and isinstance(proxy, proxy_address.ProxyService):
        docs += workloads.auth_proxy(config.auth_proxy_deployment, proxy)
    if config.worker_deployment is not None:
        docs += workloads.worker(
            config.worker_deployment,
            namespace=config.worker_namespace,
            service_account=config.worker_service_account,
            agents_namespace=config.namespace,
            proxy=proxy,
            presets=config.presets,
            gvisor=config.gvisor,
        )
    if config.sandbox_router is not None:
        docs += sandbox_router.objects(config.sandbox_router, agents_namespace=config.namespace)
    return docs


def deny_all(config: ClusterSetup) -> list[documents.Document]:
    body = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta("default-deny-all", config.namespace),
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
    }
    return [
        documents.Document(
            body,
            "Default deny: no pod of the agent namespace sends or receives anything\n"
            "unless another policy opens it. The worker cannot change this (no RBAC on\n"
            "networkpolicies).",
        )
    ]


def network_policies(config: ClusterSetup) -> list[documents.Document]:
    """The default deny, the egress variant's openings, the service pods' (``PodUp``) and the
    session pods' runtime (the worker and the sandbox router only)."""
    top = topology(config)
    egress = network.egress(top, cilium=config.cilium)
    sessions = session_network.policies(
        config.namespace, worker_namespace=config.worker_namespace, proxy_namespace=top.proxy_namespace
    )
    return deny_all(config) + egress + service_network.policies(config.namespace) + sessions


def runtime_class() -> list[documents.Document]:
    body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": _meta(GVISOR_RUNTIME_CLASS)}
    body["handler"] = "runsc"
    return [
        documents.Document(
            body,
            "gVisor: agent pods run against a user-space kernel. Install runsc on the\n"
            "nodes first (Talos: the gvisor system extension). Select it with\n"
            '`runtime_class("gvisor")` on the provider or the step.',
        )
    ]


def managed_settings(config: ClusterSetup) -> list[documents.Document]:
    docs = []
    for preset in config.presets:
        text = json.dumps(MANAGED_SETTINGS_PRESETS[preset], indent=2) + "\n"
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(
                preset_configmap_name(preset), config.namespace, labels={labels.LABEL_PART_OF: labels.PART_OF_VALUE}
            ),
            "data": {layout.MANAGED_SETTINGS_FILE: text},
        }
        comment = (
            f'Managed-settings preset "{preset}": register it with\n'
            f'managed_settings_preset("{preset}", "{preset_configmap_name(preset)}"). Mounted read-only at\n'
            f"{layout.MANAGED_SETTINGS_DIR}, it replaces the image's baked file."
        )
        docs.append(documents.Document(body, comment))
    return docs


def render_documents(config: ClusterSetup, *, profile: Mapping[str, str] | None = None) -> list[documents.Document]:
    """Every object of ``config`` with its comment, in apply order (namespaces first)."""
    docs = namespaces(config) + worker_rbac(config)
    if config.check_rbac:
        docs += check_rbac(config)
    if config.agent_sandbox_rbac:
        docs += agent_sandbox_rbac(config)
    docs += network_policies(config)
    if config.gvisor:
        docs += runtime_class()
    docs += managed_settings(config)
    if profile:
        docs += [documents.Document(cm) for cm in profile_configmaps(config.namespace, profile)]
    return docs + workloads_documents(config)


def render(config: ClusterSetup, *, profile: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every object of ``config``, in apply order (namespaces first), as plain dicts."""
    return [dict(d.body) for d in render_documents(config, profile=profile)]
