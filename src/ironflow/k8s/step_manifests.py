"""The objects an agent step creates, as plain dicts: the Pod and its prompt ConfigMap (pure).

Functions of their inputs only: the provider settings, the step, the worker environment,
the clock value and the random bits are all passed in, so a dry run renders exactly what
a launch would create. The step's invocation-time checks live here too
(:func:`merged_pod_inputs`, :func:`validate_hardening`, :func:`validate_inputs`): they
refuse with :class:`~ironflow.errors.StepConfigError` and the reference's message, and
name variables, never their values.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from ironflow import errors, labels, step_sandbox, steps
from ironflow.claude import command, layout, profile
from ironflow.k8s import hardening
from ironflow.k8s.settings import ProviderSettings

__all__ = [
    "CONTAINER_NAME",
    "DEFAULT_EXPIRY_MARGIN_S",
    "INIT_CONTAINER_NAME",
    "POD_NAME_PREFIX",
    "PodInputs",
    "active_deadline_seconds",
    "build_env",
    "build_pod",
    "generate_pod_name",
    "lifetime_seconds",
    "merged_pod_inputs",
    "parent_dir",
    "placement",
    "prompt_configmap",
    "prompt_configmap_name",
    "proxy_forbidden_message",
    "validate_hardening",
    "validate_inputs",
    "with_secret_env",
]

CONTAINER_NAME: Final = "claude-code"
INIT_CONTAINER_NAME: Final = "ironflow-input-fetch"
POD_NAME_PREFIX: Final = "claude-code"
#: Added to the timeout for the expiry annotation even without a sandbox (reference).
DEFAULT_EXPIRY_MARGIN_S: Final = 60.0
_I64_MAX: Final = 2**63 - 1
_PROMPT_VOLUME: Final = "ironflow-prompt"
_MANAGED_SETTINGS_VOLUME: Final = "ironflow-managed-settings"


@dataclass(frozen=True)
class PodInputs:
    """The provider's settings merged with the step's, after the invocation checks (§1.3)."""

    secret_env: tuple[step_sandbox.SecretEnvVar, ...]
    service_account: str | None
    runtime_class: str | None
    host_volumes: tuple[tuple[str, str], ...]
    pvc_volumes: tuple[tuple[str, str], ...]
    step_pvc_volumes: tuple[step_sandbox.PvcVolume, ...]
    read_only_volumes: tuple[step_sandbox.ReadOnlyVolume, ...]
    managed_settings_configmap: str | None
    labels: Mapping[str, str]


def with_secret_env(
    current: Sequence[step_sandbox.SecretEnvVar], entry: step_sandbox.SecretEnvVar
) -> tuple[step_sandbox.SecretEnvVar, ...]:
    """``current`` with ``entry``: it replaces the variable of its name in place, else goes last.

    >>> a, b = step_sandbox.SecretEnvVar("A", "s", "k"), step_sandbox.SecretEnvVar("A", "t", "k")
    >>> with_secret_env([a], b) == (b,)
    True
    """
    for i, existing in enumerate(current):
        if existing.name == entry.name:
            return (*current[:i], entry, *current[i + 1 :])
    return (*current, entry)


def proxy_forbidden_message(name: str) -> str:
    return f"auth_proxy is set: the pod must not receive {name}; the proxy injects the credential"


def placement(settings: ProviderSettings) -> dict[str, Any]:
    """The pod spec fields of where a provider's pods go and what pulls their image (image pull
    secrets, node selector, tolerations), as every pod of the provider has them (pure)."""
    spec: dict[str, Any] = {}
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": secret} for secret in settings.image_pull_secrets]
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        spec["tolerations"] = [t.render() for t in settings.tolerations]
    return spec


def merged_pod_inputs(settings: ProviderSettings, config: steps.AgentConfig) -> PodInputs:
    """Merge provider and step pod settings, refusing what would weaken the sandbox.

    Raises:
        StepConfigError: in the reference's order and words (credentials under an auth
            proxy or a sandbox, blank runtime class, unknown preset, reserved label).
    """
    if config.resume_environment_id is not None and settings.environment is None:
        raise errors.StepConfigError("resume_environment needs K8sEphemeralProvider.environment_volume")
    _refuse_plain_credentials(settings)
    secret_env = _merged_secret_env(settings, config)
    service_account = config.pod.service_account or settings.service_account
    runtime_class = config.pod.runtime_class if config.pod.runtime_class is not None else settings.runtime_class
    if runtime_class is not None and not runtime_class.strip():
        raise errors.StepConfigError("runtime class must not be empty")
    keep = not config.pod.without_provider_volumes
    configmap = _managed_settings_configmap(settings, config)
    return PodInputs(
        secret_env=secret_env,
        service_account=service_account,
        runtime_class=runtime_class,
        host_volumes=settings.volumes if keep else (),
        pvc_volumes=settings.pvc_volumes if keep else (),
        step_pvc_volumes=config.pod.pvc_volumes,
        read_only_volumes=(*settings.read_only_volumes, *config.pod.read_only_volumes),
        managed_settings_configmap=configmap,
        labels=MappingProxyType(_merged_labels(settings, config)),
    )


def _refuse_plain_credentials(settings: ProviderSettings) -> None:
    """A credential in the pod spec under an auth proxy or a sandbox (the reference's order)."""
    fail = errors.StepConfigError
    if settings.auth_proxy_url is not None:
        if settings.oauth_credentials is not None:
            raise fail(proxy_forbidden_message("oauth_credentials"))
        if settings.oauth_credentials_secret is not None:
            raise fail(proxy_forbidden_message(layout.CREDENTIALS_ENV))
        for name, value in settings.env_vars:
            if layout.withheld_from_proxied_sandbox(name, value):
                raise fail(proxy_forbidden_message(name))
    if settings.sandbox is not None:
        if settings.oauth_credentials is not None:
            raise fail("sandboxed provider refuses inline oauth_credentials; use oauth_credentials_from_secret")
        for name, _ in settings.env_vars:
            if name in ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY"):
                raise fail(f"sandboxed provider refuses {name} as a plain env var; use env_from_secret")


def _merged_secret_env(settings: ProviderSettings, config: steps.AgentConfig) -> tuple[step_sandbox.SecretEnvVar, ...]:
    """Provider Secret env, the OAuth credentials Secret, then the step's (a step's entry wins by name)."""
    secret_env = settings.secret_env
    if settings.oauth_credentials_secret is not None:
        secret, key = settings.oauth_credentials_secret
        secret_env = (*secret_env, step_sandbox.SecretEnvVar(layout.CREDENTIALS_ENV, secret, key))
    for entry in config.pod.secret_env:
        secret_env = with_secret_env(secret_env, entry)
    if settings.auth_proxy_url is not None:
        for entry in secret_env:
            if layout.withheld_from_proxied_sandbox(entry.name, ""):  # the value is in a Secret
                raise errors.StepConfigError(proxy_forbidden_message(entry.name))
    return secret_env


def _managed_settings_configmap(settings: ProviderSettings, config: steps.AgentConfig) -> str | None:
    """The ConfigMap of the step's (or the provider's default) managed-settings preset, if any."""
    preset = config.pod.managed_settings or settings.default_managed_settings
    if preset is None:
        return None
    if preset not in settings.managed_settings_presets:
        known = ", ".join(sorted(settings.managed_settings_presets))
        raise errors.StepConfigError(f"unknown managed settings preset '{preset}', known presets: [{known}]")
    return settings.managed_settings_presets[preset]


def _merged_labels(settings: ProviderSettings, config: steps.AgentConfig) -> dict[str, str]:
    """Provider labels, the egress-profile label, then the step's (no reserved key)."""
    for key in config.pod_labels:
        if labels.is_reserved_label(key):
            raise errors.StepConfigError(labels.reserved_label_message(key))
    merged = dict(settings.pod_labels)
    if settings.egress_profile is not None:
        merged[labels.LABEL_EGRESS_PROFILE] = settings.egress_profile
    merged.update(config.pod_labels)
    return merged


def _trim(path: str) -> str:
    return path.rstrip("/")


def validate_hardening(settings: ProviderSettings, inputs: PodInputs) -> None:
    """Refuse mounts that would hide or replace a sandbox path, and incomplete secret refs.

    Raises:
        StepConfigError: the first problem, in the reference's order.
    """
    fail = errors.StepConfigError
    seen = {_trim(path) for _, path in (*inputs.host_volumes, *inputs.pvc_volumes)}
    if settings.conversations_claim is not None:
        seen.add(layout.CONVERSATIONS_MOUNT_PATH)
        for p in settings.claude_profiles:
            if p.subdir == "projects" or p.subdir.startswith("projects/"):
                raise fail(  # the reference's text: its volume is the "sessions volume" (Claude's word)
                    f"claude profile subdir '{p.subdir}' overlaps the sessions volume at "
                    f"'{layout.CONVERSATIONS_MOUNT_PATH}'"
                )
    for volume in inputs.step_pvc_volumes:
        problem = volume.problem()
        if problem is not None:
            raise fail(f"step pvc volume: {problem}")
    checked = [("read-only volume", v.mount_path) for v in inputs.read_only_volumes]
    checked += [("step pvc volume", v.mount_path) for v in inputs.step_pvc_volumes]
    for kind, path in checked:
        problem = layout.mount_path_problem(kind, path)
        if problem is not None:
            raise fail(problem)
        if _trim(path) in seen:
            raise fail(f"duplicate volume mount path '{path}'")
        seen.add(_trim(path))
    for entry in inputs.secret_env:
        if not (entry.name and entry.secret and entry.key):
            raise fail(
                "secret env entry needs a non-empty name, secret and key, "
                f"got name='{entry.name}' secret='{entry.secret}' key='{entry.key}'"
            )


def parent_dir(path: str) -> str:
    """The directory part of ``path`` (``""`` for ``/file``)."""
    return path.rsplit("/", 1)[0] if "/" in path else ""


def validate_inputs(inputs: Sequence[step_sandbox.AgentInput]) -> None:
    """Each input lands in a file under a directory the init container can mount.

    Raises:
        StepConfigError: a relative path, a file directly under ``/``, a path that
            is not a plain file path, or one at or under a reserved sandbox path.
    """
    for item in inputs:
        path = item.mount_path
        if not path.startswith("/"):
            raise errors.StepConfigError(f"agent input mount_path must be absolute, got '{path}'")
        if parent_dir(path) in ("", "/"):
            raise errors.StepConfigError(f"agent input mount_path must live under a directory (not '/'), got '{path}'")
        if posixpath.normpath(path) != path:
            raise errors.StepConfigError(
                f"agent input mount_path must be a normalized file path (no '.', '..', '//' or trailing '/'), "
                f"got '{path}'"
            )
        problem = layout.mount_path_problem("agent input", path)
        if problem is not None:
            raise errors.StepConfigError(problem)


def generate_pod_name(now_ms: int, rand32: int, prefix: str = POD_NAME_PREFIX) -> str:
    """``<prefix>-<unix ms hex>-<8 hex random>``: sortable by creation, unique per call.

    >>> generate_pod_name(0x18F2A3B4C5D, 0xAB)
    'claude-code-18f2a3b4c5d-000000ab'
    """
    return f"{prefix}-{now_ms:x}-{rand32 & 0xFFFFFFFF:08x}"


def prompt_configmap_name(pod_name: str) -> str:
    return f"{pod_name}-prompt"


def lifetime_seconds(settings: ProviderSettings) -> int:
    """Timeout plus margin, whole seconds: how long the objects may live (expiry annotation)."""
    margin = settings.sandbox.deadline_margin_s if settings.sandbox is not None else DEFAULT_EXPIRY_MARGIN_S
    return int(settings.timeout_s + margin)


def active_deadline_seconds(settings: ProviderSettings) -> int | None:
    """Explicit deadline (truncated, saturating), else timeout + margin when sandboxed, else none."""
    if settings.active_deadline_s is not None:
        return min(int(settings.active_deadline_s), _I64_MAX)
    if settings.sandbox is not None:
        return int(settings.timeout_s + settings.sandbox.deadline_margin_s)
    return None


def prompt_configmap(
    *, pod_name: str, namespace: str, prompt: str, pod_labels: Mapping[str, str], expires_at: int
) -> dict[str, Any]:
    """The ConfigMap holding a large prompt; labelled so run cleanup and the reaper find it."""
    cm_labels = {labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE, labels.LABEL_COMPONENT: labels.COMPONENT_PROMPT_DATA}
    if labels.LABEL_ROOT_RUN_ID in pod_labels:
        cm_labels[labels.LABEL_ROOT_RUN_ID] = pod_labels[labels.LABEL_ROOT_RUN_ID]
    if labels.LABEL_RUN_ID in pod_labels and labels.LABEL_STEP in pod_labels:
        cm_labels[labels.LABEL_RUN_ID] = pod_labels[labels.LABEL_RUN_ID]
        cm_labels[labels.LABEL_STEP] = pod_labels[labels.LABEL_STEP]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": prompt_configmap_name(pod_name),
            "namespace": namespace,
            "labels": cm_labels,
            "annotations": {labels.ANNOTATION_EXPIRES_AT: str(expires_at)},
        },
        "data": {layout.PROMPT_KEY: prompt},
    }


def build_env(
    *,
    worker_env: Mapping[str, str],
    plain: Sequence[tuple[str, str]],
    secret: Sequence[step_sandbox.SecretEnvVar],
) -> list[dict[str, Any]]:
    """Blanking entries, then plain values, then secret references (§1.5 order).

    A worker variable starting with ``CLAUDE`` (and always ``IRONFLOW_ALLOW_BYPASS``) is
    set to ``""`` in the pod unless the step sets it, so the image's or the node's value
    can never reach the agent by accident. Values of ``worker_env`` are never read.
    """
    explicit = {name for name, _ in plain} | {entry.name for entry in secret}
    blank = sorted({name for name in worker_env if name.startswith("CLAUDE")})
    blank.append(layout.ALLOW_BYPASS_ENV)
    env: list[dict[str, Any]] = [{"name": name, "value": ""} for name in dict.fromkeys(blank) if name not in explicit]
    env += [{"name": name, "value": value} for name, value in plain]
    env += [
        {"name": entry.name, "valueFrom": {"secretKeyRef": {"name": entry.secret, "key": entry.key}}}
        for entry in secret
    ]
    return env


def _ro_volume_source(volume: step_sandbox.ReadOnlyVolume) -> dict[str, Any]:
    source = volume.source
    if isinstance(source, step_sandbox.ConfigMapSource):
        return {"configMap": {"name": source.name}}
    if isinstance(source, step_sandbox.HostPathSource):
        return {"hostPath": {"path": source.path, "type": "Directory"}}
    return {"persistentVolumeClaim": {"claimName": source.claim_name, "readOnly": True}}


def _mount(name: str, path: str, *, sub_path: str | None = None, read_only: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "mountPath": path}
    if sub_path is not None:
        out["subPath"] = sub_path
    if read_only:
        out["readOnly"] = True
    return out


def _volumes(
    settings: ProviderSettings, inputs: PodInputs, config: steps.AgentConfig, prompt_cm: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes, main-container mounts and init-container mounts, in the §1.5 table order."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    init_mounts: list[dict[str, Any]] = []
    for i, (host, path) in enumerate(inputs.host_volumes):
        volumes.append({"name": f"vol-{i}", "hostPath": {"path": host, "type": "Directory"}})
        mounts.append(_mount(f"vol-{i}", path))
    claim_volume: dict[str, str] = {}
    for i, (claim, path) in enumerate(inputs.pvc_volumes):
        volumes.append({"name": f"pvc-{i}", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append(_mount(f"pvc-{i}", path))
        claim_volume.setdefault(claim, f"pvc-{i}")
    for i, pvc in enumerate(inputs.step_pvc_volumes):
        name = claim_volume.get(pvc.claim_name)
        if name is None:  # one volume per claim: a second mount reuses it
            name = f"step-pvc-{i}"
            claim_volume[pvc.claim_name] = name
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": pvc.claim_name}})
        mounts.append(_mount(name, pvc.mount_path, sub_path=pvc.sub_path, read_only=pvc.read_only))
    for i, directory in enumerate(sorted({parent_dir(item.mount_path) for item in config.inputs})):
        volumes.append({"name": f"ironflow-input-{i}", "emptyDir": {}})
        mounts.append(_mount(f"ironflow-input-{i}", directory))
        init_mounts.append(_mount(f"ironflow-input-{i}", directory))
    if prompt_cm is not None:
        volumes.append({"name": _PROMPT_VOLUME, "configMap": {"name": prompt_cm}})
        mounts.append(_mount(_PROMPT_VOLUME, layout.PROMPT_MOUNT_DIR, read_only=True))
    for i, ro in enumerate(inputs.read_only_volumes):
        volumes.append({"name": f"ro-{i}", **_ro_volume_source(ro)})
        mounts.append(_mount(f"ro-{i}", ro.mount_path, sub_path=ro.sub_path, read_only=True))
    if inputs.managed_settings_configmap is not None:
        item = {"key": layout.MANAGED_SETTINGS_FILE, "path": layout.MANAGED_SETTINGS_FILE}
        volumes.append(
            {
                "name": _MANAGED_SETTINGS_VOLUME,
                "configMap": {"name": inputs.managed_settings_configmap, "items": [item]},
            }
        )
        mounts.append(_mount(_MANAGED_SETTINGS_VOLUME, layout.MANAGED_SETTINGS_DIR, read_only=True))
    for i, prof in enumerate(settings.claude_profiles):
        volumes.append({"name": f"ironflow-claude-profile-{i}", "configMap": {"name": prof.configmap}})
        mounts.append(_mount(f"ironflow-claude-profile-{i}", profile.profile_mount_path(i), read_only=True))
    return volumes, mounts, init_mounts


def _refuse_shared_mount_paths(mounts: Sequence[Mapping[str, Any]]) -> None:
    """Last check on the rendered mounts: two at one path would make the API refuse the pod.

    :func:`validate_hardening` catches the reference's cases; this also catches an input
    directory at ``/tmp`` or ``/home/claude`` or on a volume's path.
    """
    seen: set[str] = set()
    for mount in mounts:
        path = _trim(mount["mountPath"]) or "/"
        if path in seen:
            raise errors.StepConfigError(f"duplicate volume mount path '{mount['mountPath']}'")
        seen.add(path)


def _input_script(inputs: Sequence[step_sandbox.AgentInput]) -> str:
    lines = "".join(
        f"curl -sSfL --retry 3 --max-time 300 {command.shell_quote(i.url)} -o {command.shell_quote(i.mount_path)}\n"
        for i in inputs
    )
    return "set -e\n" + lines


def build_pod(
    settings: ProviderSettings,
    inputs: PodInputs,
    config: steps.AgentConfig,
    *,
    name: str,
    shell_command: str,
    plain_env: Sequence[tuple[str, str]],
    worker_env: Mapping[str, str],
    expires_at: int | None,
    prompt_configmap: str | None = None,
) -> dict[str, Any]:
    """The agent Pod (§1.5), hardened when the provider is sandboxed.

    Raises:
        StepConfigError: :func:`validate_hardening`, then :func:`validate_inputs`.
    """
    validate_hardening(settings, inputs)
    validate_inputs(config.inputs)
    pull_policy = str(settings.image_pull_policy)

    volumes, mounts, init_mounts = _volumes(settings, inputs, config, prompt_configmap)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": settings.image,
        "imagePullPolicy": pull_policy,
        "command": ["sh", "-c", shell_command],
        "env": build_env(worker_env=worker_env, plain=plain_env, secret=inputs.secret_env),
    }
    if mounts:
        container["volumeMounts"] = mounts
    resources = settings.resources.render()
    if resources is not None:
        container["resources"] = resources

    # No Service's address in the agent's env (FOO_SERVICE_HOST...): the agent learns nothing it may not reach.
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": hardening.STEP_TERMINATION_GRACE_S,
        "containers": [container],
    }
    if config.inputs:
        spec["initContainers"] = [
            {
                "name": INIT_CONTAINER_NAME,
                "image": settings.input_init_image,
                "imagePullPolicy": pull_policy,
                "command": ["sh", "-c", _input_script(config.inputs)],
                "volumeMounts": init_mounts,
            }
        ]
    if volumes:
        spec["volumes"] = volumes
    if inputs.service_account:
        spec["serviceAccountName"] = inputs.service_account
    spec.update(placement(settings))
    if settings.sandbox is not None:
        spec = hardening.harden_pod_spec(spec, settings.sandbox, conversations_claim=settings.conversations_claim)
    _refuse_shared_mount_paths(spec["containers"][0].get("volumeMounts", []))
    deadline = active_deadline_seconds(settings)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if inputs.runtime_class is not None:
        spec["runtimeClassName"] = inputs.runtime_class

    metadata: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        # The two app.kubernetes.io keys come last: they always win (reaper and cleanup select on them).
        "labels": {
            **inputs.labels,
            labels.LABEL_MANAGED_BY: labels.MANAGED_BY_VALUE,
            labels.LABEL_COMPONENT: labels.COMPONENT_CLAUDE_RUNNER,
        },
    }
    if expires_at is not None:
        metadata["annotations"] = {labels.ANNOTATION_EXPIRES_AT: str(expires_at)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
