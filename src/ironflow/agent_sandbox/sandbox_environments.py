"""A persistent environment on agent-sandbox v1beta1: one PVC per environment id, mounted by one claim (pure).

How it rides on the controller (agent-sandbox 1.0) without changing it:

* the template's pod holds the environment's mount as an ``emptyDir`` named :data:`VOLUME`, so
  a warm member has no environment, and the template allows claim volume claim templates;
* a step with an environment claims under the environment's id, with a volume claim template
  named :data:`VOLUME`: the controller cold-starts a Sandbox named after the claim and mounts
  PVC ``<VOLUME>-<id>`` (:func:`pvc_name`) in place of the emptyDir;
* ironflow creates that PVC first (:func:`environment_pvc`), adoptable by that Sandbox only
  (``agents.x-k8s.io/sandbox-name-hash`` = NameHash(id)) and owned, not controlled, by the
  SandboxTemplate: when the claim and its Sandbox go, the garbage collector drops the
  Sandbox's reference and keeps the PVC, and the next claim under the id adopts it again;
* the claim's name is the id, so two live sandboxes of one environment cannot exist: the
  second create is refused (409) and said in one line (:func:`in_use_message`).

The PVC carries ``ironflow.io/expires-at`` (now + max(ttl, pod lifetime), refreshed on each
resume) and the environment labels, so the orphan reaper deletes it once unused for its ttl;
deleting the template deletes its environments. Nothing here talks to a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import models
from ironflow.k8s import environments

__all__ = [
    "MAX_ID_LENGTH",
    "NAME_HASH_LABEL",
    "VOLUME",
    "check_id",
    "claim_volume",
    "environment_pvc",
    "in_use_message",
    "name_hash",
    "placeholder",
    "pvc_name",
]

#: The environment's pod volume in the template (an emptyDir) and the claim's volume claim template.
VOLUME: Final = "ironflow-environment"
#: The claim, its Sandbox and its pod are named after the id: a pod name is a DNS label.
MAX_ID_LENGTH: Final = 63
#: The controller adopts an unowned PVC whose value is NameHash(the Sandbox's name).
NAME_HASH_LABEL: Final = labels.LABEL_SANDBOX_NAME_HASH


def name_hash(name: str) -> str:
    """agent-sandbox's ``NameHash``: 32-bit FNV-1a of the name, 8 lowercase hex digits.

    >>> name_hash(""), name_hash("a"), name_hash("my-sandbox")
    ('811c9dc5', 'e40c292c', '374de8f5')
    """
    h = 0x811C9DC5
    for byte in name.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


def pvc_name(environment_id: str) -> str:
    """The PVC of an environment: the controller's ``<volume claim template>-<sandbox>``.

    >>> pvc_name("ironflow-env-18c2-0a1b2c3d")
    'ironflow-environment-ironflow-env-18c2-0a1b2c3d'
    """
    return f"{VOLUME}-{environment_id}"


def check_id(environment_id: str) -> None:
    """Refuse an id that cannot name a claim, a Sandbox and a pod.

    Raises:
        StepConfigError: outside ``[a-z0-9-]``, or longer than :data:`MAX_ID_LENGTH`.
    """
    environments.environment_claim_for(environment_id, now_ms=0, rand32=0)  # the k8s backend's rule
    if len(environment_id) > MAX_ID_LENGTH or environment_id.startswith("-") or environment_id.endswith("-"):
        raise errors.StepConfigError(
            f"environment id '{errors.truncate(environment_id, 70)}' cannot name an agent-sandbox claim: "
            f"use at most {MAX_ID_LENGTH} of [a-z0-9-], starting and ending with a letter or digit"
        )


def in_use_message(environment_id: str) -> str:
    """The one line for a second live sandbox asking for an environment."""
    return (
        f"environment '{environment_id}' is in use by a live sandbox (SandboxClaim {environment_id}): its volume is "
        "ReadWriteOnce, one sandbox at a time; wait for that step to end, or start a new environment"
    )


def placeholder(pod: models.PodTemplate, claim_name: str) -> models.PodTemplate:
    """``pod`` with the volume of PVC ``claim_name`` made the emptyDir :data:`VOLUME` (its mounts
    follow the new name): what a warm member mounts, and what a claim's template replaces."""
    spec = dict(pod.spec)
    renamed: dict[str, str] = {}
    volumes: list[Mapping[str, Any]] = []
    for volume in spec.get("volumes") or ():
        if (volume.get("persistentVolumeClaim") or {}).get("claimName") == claim_name:
            renamed[volume["name"]] = VOLUME
            if VOLUME not in [v["name"] for v in volumes]:
                volumes.append({"name": VOLUME, "emptyDir": {}})
        else:
            volumes.append(volume)
    if not renamed:
        raise errors.ConfigError(f"the template's pod mounts no claim '{claim_name}' to hold the environment")
    spec["volumes"] = volumes
    for key in ("initContainers", "containers"):
        if key in spec:
            spec[key] = [_renamed_mounts(c, renamed) for c in spec[key]]
    return models.PodTemplate(spec=spec, labels=pod.labels, annotations=pod.annotations)


def _renamed_mounts(container: Mapping[str, Any], renamed: Mapping[str, str]) -> dict[str, Any]:
    out = dict(container)
    if "volumeMounts" in out:
        out["volumeMounts"] = [{**m, "name": renamed.get(m["name"], m["name"])} for m in out["volumeMounts"]]
    return out


def claim_volume(volume: environments.EnvironmentVolume) -> models.VolumeClaimTemplate:
    """The claim's volume claim template: the environment's size and class (the PVC exists by
    then, so the controller adopts it rather than making one from this)."""
    return models.VolumeClaimTemplate(VOLUME, storage=volume.size, storage_class_name=volume.storage_class)


def environment_pvc(
    environment_id: str,
    *,
    namespace: str,
    volume: environments.EnvironmentVolume,
    template: Mapping[str, Any],
    pod_labels: Mapping[str, str],
    expires_at: int,
) -> dict[str, Any]:
    """The environment's PVC: the k8s backend's environment claim (RWO, labels, expiry) named
    :func:`pvc_name`, adoptable by the Sandbox of that id, owned by the SandboxTemplate ``template``
    (an API object: its uid) without controlling it."""
    pvc = environments.build_environment_claim(
        pvc_name(environment_id), namespace=namespace, volume=volume, pod_labels=pod_labels, expires_at=expires_at
    )
    meta = pvc["metadata"]
    meta["labels"][NAME_HASH_LABEL] = name_hash(environment_id)
    tmeta = template["metadata"]
    owner = {
        "apiVersion": template["apiVersion"],
        "kind": "SandboxTemplate",
        "name": tmeta["name"],
        "uid": tmeta["uid"],
    }
    meta["ownerReferences"] = [owner]  # no controller: the Sandbox adopts it, the template keeps it
    return pvc
