"""The auth proxy's and the worker's own Deployments, with the proxy's Service (pure).

What ``ironflow manifests --auth-proxy-deployment --worker-deployment`` adds to the set-up
objects. Both pods keep the hardened posture of agent pods (non-root uid 10001, seccomp
``RuntimeDefault``, no privilege escalation, read-only root, every capability dropped,
``enableServiceLinks: false`` so no other Service's address leaks into their env) and get
requests and limits. A secret reaches a container only through ``secretKeyRef``: this
module never sees a secret value, and its comments say which Secret to create with which
keys.

The proxy's port has one source: the pods listen on
:data:`ironflow.cluster.network.AUTH_PROXY_PORT` (the port the NetworkPolicies open) and serve
the egress proxy on :data:`~ironflow.cluster.network.EGRESS_PORT` (the Service's ``egress``); the
Service's name, namespace and port come from the proxy URL
(:class:`~ironflow.cluster.proxy_address.ProxyService`). The worker reads a provider file
rendered here from the same names, so its agent pods land where the policies expect them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import yaml

from ironflow import errors, labels
from ironflow.claude import cli
from ironflow.cluster import claude_settings, documents, network
from ironflow.cluster.proxy_address import ProxyAddress, ProxyService

__all__ = [
    "AUTH_PROXY_RESOURCES",
    "AUTH_PROXY_SECRET",
    "DEFAULT_AUTH_PROXY_IMAGE",
    "DEFAULT_RUNNER_IMAGE",
    "DEFAULT_WORKER_IMAGE",
    "PROVIDER_CONFIGMAP",
    "PROVIDER_PATH",
    "RESOURCE_KEYS",
    "UID",
    "WORKER_METRICS_PORT",
    "WORKER_RESOURCES",
    "WORKER_SECRET",
    "AuthProxyDeployment",
    "Resources",
    "WorkerDeployment",
    "auth_proxy",
    "deployment_object",
    "health_probe",
    "pod_spec",
    "provider_file",
    "secret_env",
    "worker",
]

#: ``ironflow.__version__``, which this pure module cannot import (the package root loads the
#: provider protocol); a unit test keeps the two equal.
_VERSION: Final = "0.1.0"
DEFAULT_AUTH_PROXY_IMAGE: Final = f"ironflow-auth-proxy:{_VERSION}"
DEFAULT_WORKER_IMAGE: Final = f"ironflow-worker:{_VERSION}"
#: ``docker/claude-runner/IMAGE_TAG`` (a unit test keeps them equal).
DEFAULT_RUNNER_IMAGE: Final = f"ironflow-claude-runner:{cli.CLAUDE_CODE_VERSION}-1"
#: Keys ``admin-key``, ``database-url``, ``secret-keys``, in the proxy's namespace.
AUTH_PROXY_SECRET: Final = "ironflow-auth-proxy"  # noqa: S105 - a Secret's name
#: Keys ``store-url``, ``auth-proxy-admin-key``, in the worker's namespace.
WORKER_SECRET: Final = "ironflow-worker"  # noqa: S105 - a Secret's name
PROVIDER_CONFIGMAP: Final = "ironflow-worker-provider"
PROVIDER_PATH: Final = "/etc/ironflow/provider/provider.yaml"
WORKER_METRICS_PORT: Final = 9090
#: The pods' user and group, the images' USER (docker/auth-proxy, docker/worker).
UID: Final = 10001
#: The settable keys of :class:`Resources`, as ``--worker-resources`` spells them.
RESOURCE_KEYS: Final = ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory")


@dataclass(frozen=True)
class Resources:
    """A container's requests and limits (Kubernetes quantities, checked where they are read)."""

    cpu_request: str
    memory_request: str
    cpu_limit: str
    memory_limit: str

    def render(self) -> dict[str, Any]:
        return {
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": {"cpu": self.cpu_limit, "memory": self.memory_limit},
        }

    def with_values(self, values: dict[str, str]) -> Resources:
        """These resources with some of :data:`RESOURCE_KEYS` replaced."""
        unknown = sorted(set(values) - set(RESOURCE_KEYS))
        if unknown:
            raise errors.ConfigError(f"unknown resource '{unknown[0]}': known are {', '.join(RESOURCE_KEYS)}")
        fields = {f"{k.split('.')[1]}_{k.split('.')[0].removesuffix('s')}": v for k, v in values.items()}
        return replace(self, **fields)


AUTH_PROXY_RESOURCES: Final = Resources("250m", "128Mi", "1", "256Mi")
WORKER_RESOURCES: Final = Resources("100m", "256Mi", "1", "1Gi")


@dataclass(frozen=True)
class AuthProxyDeployment:
    """The proxy's Deployment: two replicas share the PostgreSQL registry."""

    image: str = DEFAULT_AUTH_PROXY_IMAGE
    replicas: int = 2
    resources: Resources = field(default=AUTH_PROXY_RESOURCES)

    def __post_init__(self) -> None:
        _check_image("auth proxy image", self.image)
        if self.replicas < 1:
            raise errors.ConfigError(f"auth proxy replicas must be at least 1, got {self.replicas}")


@dataclass(frozen=True)
class WorkerDeployment:
    """The worker's Deployment, and the runner image its agent pods use."""

    image: str = DEFAULT_WORKER_IMAGE
    runner_image: str = DEFAULT_RUNNER_IMAGE
    resources: Resources = field(default=WORKER_RESOURCES)
    #: The agent pods' ``resources`` keys in the provider file (``cpu_limit``: ``4``...), checked by
    #: the caller; empty: the provider's defaults (docs/k8s-provider.md).
    agent_resources: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_image("worker image", self.image)
        _check_image("runner image", self.runner_image)


def _check_image(name: str, image: str) -> None:
    if not image or any(c.isspace() for c in image) or image.endswith((":latest", ":")):
        raise errors.ConfigError(f"{name} '{image}' must be a pinned reference like registry/name:1.2.3")


def _labels(name: str) -> dict[str, str]:
    return {labels.LABEL_NAME: name, labels.LABEL_PART_OF: labels.PART_OF_VALUE}


def secret_env(env: str, secret: str, key: str, *, optional: bool = False) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": secret, "key": key}
    if optional:
        ref["optional"] = True
    return {"name": env, "valueFrom": {"secretKeyRef": ref}}


def health_probe(port: str, *, delay: int) -> dict[str, Any]:
    probe: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": port}}
    if delay:
        probe["initialDelaySeconds"] = delay
    return {**probe, "periodSeconds": 10, "timeoutSeconds": 3, "failureThreshold": 3}


def pod_spec(container: dict[str, Any], *, automount: bool, **extra: Any) -> dict[str, Any]:
    """A workload's pod, hardened as Pod Security ``restricted`` wants, around its one container."""
    hardened = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    return {
        **extra,
        "automountServiceAccountToken": automount,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{**container, "securityContext": hardened}],
    }


def deployment_object(name: str, namespace: str, replicas: int, pod: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {labels.LABEL_NAME: name}},
            **spec,
            "template": {"metadata": {"labels": _labels(name)}, "spec": pod},
        },
    }


def auth_proxy(spec: AuthProxyDeployment, proxy: ProxyService) -> list[documents.Document]:
    """The proxy's Deployment, its Service (the URL's name and port) and a PodDisruptionBudget."""
    name, port = network.AUTH_PROXY_NAME, network.AUTH_PROXY_PORT
    container = {
        "name": "auth-proxy",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [
            {"name": "http", "containerPort": port, "protocol": "TCP"},
            {"name": "egress", "containerPort": network.EGRESS_PORT, "protocol": "TCP"},
        ],
        "env": [
            {"name": "IRONFLOW_AUTH_PROXY_LISTEN", "value": f"0.0.0.0:{port}"},
            {"name": "IRONFLOW_AUTH_PROXY_EGRESS_LISTEN", "value": f"0.0.0.0:{network.EGRESS_PORT}"},
            secret_env("IRONFLOW_AUTH_PROXY_ADMIN_KEY", AUTH_PROXY_SECRET, "admin-key"),
            secret_env("IRONFLOW_AUTH_PROXY_DATABASE_URL", AUTH_PROXY_SECRET, "database-url"),
            secret_env("IRONFLOW_SECRET_KEYS", AUTH_PROXY_SECRET, "secret-keys"),
        ],
        "readinessProbe": health_probe("http", delay=0),
        "livenessProbe": health_probe("http", delay=5),
        "resources": spec.resources.render(),
    }
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {labels.LABEL_NAME: name}},
    }
    pod = pod_spec(container, automount=False, terminationGracePeriodSeconds=30, topologySpreadConstraints=[spread])
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    deployment = deployment_object(name, proxy.namespace, spec.replicas, pod, strategy=rolling)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": proxy.service, "namespace": proxy.namespace, "labels": _labels(name)},
        "spec": {
            "type": "ClusterIP",
            "selector": {labels.LABEL_NAME: name},
            "ports": [
                {"name": "http", "port": proxy.port, "targetPort": "http", "protocol": "TCP"},
                {"name": "egress", "port": network.EGRESS_PORT, "targetPort": "egress", "protocol": "TCP"},
            ],
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": proxy.namespace, "labels": _labels(name)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {labels.LABEL_NAME: name}}},
    }
    comment = (
        "The ironflow auth proxy: the only holder of the Claude credential. Replicas share the\n"
        "PostgreSQL registry, so a token issued by one is honoured by all. Create its Secret first\n"
        "(values never go in a manifest):\n"
        f"  kubectl -n {proxy.namespace} create secret generic {AUTH_PROXY_SECRET} \\\n"
        '    --from-literal=admin-key="$(openssl rand -hex 32)" \\\n'
        "    --from-literal=database-url='postgresql://USER:PASSWORD@HOST:5432/DB' \\\n"
        '    --from-literal=secret-keys="1:$(openssl rand -hex 32)"\n'
        "Without PostgreSQL: drop the two database entries and run 1 replica (tokens live in its memory).\n"
        'The worker needs the same admin-key. Rotate keys: add "2:<hex>" to secret-keys, roll the\n'
        "Deployment, then run `ironflow auth-proxy rotate-keys` in a pod (docs/auth-proxy.md).\n"
        f"The pods listen on {port} (the model relay, the admin API) and {network.EGRESS_PORT} (the egress\n"
        "proxy agents' HTTPS_PROXY points at), the ports the NetworkPolicies open. Image: docker/auth-proxy."
    )
    return [
        documents.Document(deployment, comment),
        documents.Document(
            service,
            f"{proxy.url}: agents and the worker reach the proxy here; agents its egress\n"
            f"proxy on port {network.EGRESS_PORT} (docs/egress.md).",
        ),
        documents.Document(budget, "A drain never takes every proxy replica at once."),
    ]


def provider_file(
    spec: WorkerDeployment,
    *,
    namespace: str,
    proxy: ProxyAddress | None,
    presets: Sequence[str],
    gvisor: bool,
) -> str:
    """The worker's k8s provider file (docs/k8s-provider.md): agent pods in ``namespace``, in cluster."""
    body: dict[str, Any] = {"image": spec.runner_image, "sandboxed": True, "namespace": namespace}
    if proxy is not None:
        body["auth_proxy"] = proxy.url
    else:
        body["oauth_token_secret"] = {"secret": "claude-code-oauth-token", "key": "token"}
    if gvisor:
        body["runtime_class"] = "gvisor"
    if spec.agent_resources:
        body["resources"] = dict(spec.agent_resources)
    if presets:
        body["managed_settings_presets"] = {p: claude_settings.preset_configmap_name(p) for p in presets}
        body["default_managed_settings"] = "locked" if "locked" in presets else presets[0]
    body["cluster"] = {"in_cluster": True}
    return yaml.safe_dump(body, sort_keys=False)


def worker(
    spec: WorkerDeployment,
    *,
    namespace: str,
    service_account: str,
    agents_namespace: str,
    proxy: ProxyAddress | None,
    presets: Sequence[str],
    gvisor: bool,
) -> list[documents.Document]:
    """The worker's provider ConfigMap and Deployment (metrics and ``/healthz`` on :data:`WORKER_METRICS_PORT`)."""
    name = network.WORKER_POD_NAME
    text = provider_file(spec, namespace=agents_namespace, proxy=proxy, presets=presets, gvisor=gvisor)
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PROVIDER_CONFIGMAP, "namespace": namespace, "labels": _labels(name)},
        "data": {PROVIDER_PATH.rpartition("/")[2]: text},
    }
    env = [secret_env("IRONFLOW_STORE", WORKER_SECRET, "store-url")]
    if proxy is not None:
        env.append(secret_env("IRONFLOW_AUTH_PROXY_ADMIN_KEY", WORKER_SECRET, "auth-proxy-admin-key"))
    env += [
        secret_env("CLAUDE_CODE_OAUTH_TOKEN", WORKER_SECRET, "claude-code-oauth-token", optional=True),
        secret_env("ANTHROPIC_API_KEY", WORKER_SECRET, "anthropic-api-key", optional=True),
    ]
    # The pod's own name, uid and namespace: what it creates is bound to it (ironflow.kube.owners
    # reads them; the names are its ENV_*, spelt here as the cluster layer may not import kube).
    env += [
        {"name": f"IRONFLOW_WORKER_POD_{part.upper()}", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.{part}"}}}
        for part in ("name", "uid", "namespace")
    ]
    container = {
        "name": "worker",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["ironflow"],
        "args": [
            "worker",
            "--provider",
            PROVIDER_PATH,
            "--metrics-port",
            str(WORKER_METRICS_PORT),
            "--metrics-host",
            "0.0.0.0",
            "--log-format",
            "json",
        ],
        "ports": [{"name": "metrics", "containerPort": WORKER_METRICS_PORT, "protocol": "TCP"}],
        "env": env,
        "readinessProbe": health_probe("metrics", delay=0),
        "livenessProbe": health_probe("metrics", delay=10),
        "resources": spec.resources.render(),
        "volumeMounts": [
            {"name": "provider", "mountPath": PROVIDER_PATH.rpartition("/")[0], "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    volumes = [
        {"name": "provider", "configMap": {"name": PROVIDER_CONFIGMAP}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    # The worker creates agent pods through the API server: it needs its account's token.
    pod = pod_spec(
        container, automount=True, serviceAccountName=service_account, terminationGracePeriodSeconds=60, volumes=volumes
    )
    deployment = deployment_object(name, namespace, 1, pod)
    keys = "store-url" + (", auth-proxy-admin-key (the proxy's admin-key)" if proxy is not None else "")
    comment = (
        f"The worker: takes queued runs from the store and runs their steps as agent pods in\n"
        f"{agents_namespace}, as ServiceAccount {service_account}. Create Secret {WORKER_SECRET} first with\n"
        f"{keys};\n"
        "optionally claude-code-oauth-token or anthropic-api-key (else Provider Accounts).\n"
        f"Metrics and /healthz on :{WORKER_METRICS_PORT}. More replicas share the queue: each run is leased."
    )
    return [
        documents.Document(config_map, "The worker's provider file (docs/k8s-provider.md), from the same names."),
        documents.Document(deployment, comment),
    ]
