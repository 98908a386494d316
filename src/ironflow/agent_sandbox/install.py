"""The pinned agent-sandbox controller's manifests (``ironflow sandbox install``): render, and apply server-side.

The files are the Go module's ``k8s/`` directory of ``sigs.k8s.io/agent-sandbox`` v1.0.3, shipped
as package data beside the CRDs (``crds/v1.0.3``, Apache-2.0, ``crds/LICENSE``): copied, not
generated at build time, so a wheel installs the controller without Go or a network, and a
reviewer sees the exact bytes in a diff when the pin moves. :func:`controller_objects` is what
the module's ``kustomization.yaml`` assembles: the four CRDs, the namespace, service account,
RBAC and metrics Service, and one Deployment with ``--extensions`` (the module's
``extensions.controller.yaml``, the same Deployment the kustomization patches ``controller.yaml``
into), with the ``ko://`` image placeholder replaced by a real image. :func:`apply_objects`
server-side applies them in that order (CRDs first, Deployment last) as field manager ``ironflow``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

import yaml

from ironflow import errors
from ironflow.kube import api as kube

__all__ = [
    "CONTROLLER_VERSION",
    "DEFAULT_IMAGE",
    "FIELD_MANAGER",
    "RESOURCES",
    "Installed",
    "apply_objects",
    "controller_objects",
]

CONTROLLER_VERSION: Final = "v1.0.3"
#: The release's published image (the module's manifests carry a ``ko://`` build placeholder).
DEFAULT_IMAGE: Final = f"registry.k8s.io/agent-sandbox/agent-sandbox-controller:{CONTROLLER_VERSION}"
FIELD_MANAGER: Final = "ironflow"
_PLACEHOLDER: Final = "ko://sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
_CRDS: Final = (
    "agents.x-k8s.io_sandboxes.yaml",
    "extensions.agents.x-k8s.io_sandboxclaims.yaml",
    "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
    "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
)
#: In apply order; ``controller.yaml``'s own Deployment (without ``--extensions``) is left out.
_CONTROLLER: Final = (
    "controller.yaml",
    "rbac.generated.yaml",
    "extensions.yaml",
    "extensions-rbac.generated.yaml",
    "extensions.controller.yaml",
)
_RBAC: Final = "rbac.authorization.k8s.io"
#: Where each kind of the manifests lives in the API.
RESOURCES: Final[Mapping[str, kube.Resource]] = {
    "CustomResourceDefinition": kube.Resource(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
    ),
    "Namespace": kube.NAMESPACES,
    "ServiceAccount": kube.Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "Service": kube.Resource("", "v1", "services", "Service"),
    "ClusterRole": kube.Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": kube.Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    "Deployment": kube.Resource("apps", "v1", "deployments", "Deployment"),
}


@dataclass(frozen=True)
class Installed:
    """One applied object: ``kind/name`` and whether this apply changed it (see :func:`_our_fields`)."""

    kind: str
    name: str
    namespace: str | None
    changed: bool


def _documents(*parts: str) -> list[dict[str, Any]]:
    text = resources.files("ironflow.agent_sandbox").joinpath("crds", CONTROLLER_VERSION, *parts).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def controller_objects(image: str = DEFAULT_IMAGE) -> list[dict[str, Any]]:
    """The controller's objects, in apply order, running ``image`` (package data only, no I/O).

    Raises:
        ConfigError: an empty image, or one with whitespace.
    """
    if not image or image != image.strip() or any(c.isspace() for c in image):
        raise errors.ConfigError(f"invalid --image '{errors.truncate(image, 80)}': use a registry/name:tag reference")
    objects = [doc for name in _CRDS for doc in _documents(name)]
    for name in _CONTROLLER:
        for doc in _documents("controller", name):
            if name == "controller.yaml" and doc["kind"] == "Deployment":
                continue  # the extensions Deployment below replaces it, as the kustomization does
            objects.append(doc)
    for doc in objects:
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container.get("image") == _PLACEHOLDER:
                    container["image"] = image
    return objects


def _our_fields(obj: Mapping[str, Any]) -> Any:
    """Our apply's ``managedFields`` entry (its fields and time), None without one (an apply of a name
    alone owns no field): the server rewrites it only when the apply changed a field, while the
    resourceVersion also moves for a controller's write meanwhile."""
    for entry in obj.get("metadata", {}).get("managedFields") or ():
        if entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            return entry.get("fieldsV1"), entry.get("time")
    return None


async def apply_objects(api: kube.KubeApi, objects: Sequence[Mapping[str, Any]]) -> list[Installed]:
    """Server-side apply each object (forced, field manager ``ironflow``), in order.

    Raises:
        ConfigError: a kind this installer does not know. KubernetesError: the API refused one
        (the objects before it stay applied; applying again is safe).
    """
    done: list[Installed] = []
    for obj in objects:
        kind = str(obj["kind"])
        resource = RESOURCES.get(kind)
        if resource is None:
            raise errors.ConfigError(f"sandbox install has no resource for kind {kind}")
        meta = obj["metadata"]
        namespace = meta.get("namespace") if resource.namespaced else None
        existed, before = False, None
        with contextlib.suppress(errors.KubeNotFound):
            before = _our_fields(await api.get(resource, namespace, meta["name"]))
            existed = True
        after = _our_fields(await api.patch(resource, namespace, meta["name"], obj, apply_as=FIELD_MANAGER))
        changed = not existed or before != after
        done.append(Installed(kind, str(meta["name"]), namespace, changed))
    return done
