"""The k8s provider file (YAML schema: docs/k8s-provider.md) read onto the provider's builders.

Built on :mod:`ironflow.settings_file`: every error names the key path
(``cluster.kubeconfig: must be a string, got int``) and an unknown key gets the nearest
known one. The file only picks builders; each builder makes its own checks, so a file and
a builder chain refuse the same values with the same words.

It never imports the provider: :func:`read` takes the constructor (``start``) and
returns what the builder chain returns, so ``K8sEphemeralProvider.from_file`` /
``from_dict`` can call it without an import circle. Pure but for :func:`load`: ``base`` is
where a relative ``cluster.kubeconfig`` path is taken from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Protocol, Self, TypeVar

from ironflow import errors, step_sandbox
from ironflow import settings_file as generic_file
from ironflow.auth_proxy import relays as relay_specs
from ironflow.egress import options as egress_options
from ironflow.egress import policy as egress_policy
from ironflow.k8s import environments
from ironflow.k8s.settings import DEFAULT_SESSION_VOLUME_SIZE, RESOURCE_FIELDS, K8sResources, SessionVolume, Toleration
from ironflow.kube import clusters
from ironflow.settings_file import Section

__all__ = ["REFUSED_KEYS", "TOP_KEYS", "ProviderBuilder", "load", "read", "top_section"]

#: Keys a provider file must never hold, and why (a secret does not belong in a file).
REFUSED_KEYS: Final = {
    "oauth_credentials": "inline credentials do not belong in a settings file; "
    "use oauth_credentials_secret: {secret: ..., key: ...}",
    "auth_proxy_admin_key": "the admin key does not belong in a settings file; "
    "set IRONFLOW_AUTH_PROXY_ADMIN_KEY in the worker environment",
}

#: Top-level keys that map to one builder each: key, how to read it, the builder's name.
_SIMPLE: Final[tuple[tuple[str, Callable[[Section, str], Any], str], ...]] = (
    ("namespace", Section.text, "namespace"),
    ("claude_path", Section.text, "claude_path"),
    ("working_dir", Section.text, "working_dir"),
    ("service_account", Section.text, "service_account"),
    ("image_pull_policy", Section.text, "image_pull_policy"),
    ("timeout_seconds", Section.number, "timeout"),
    ("input_init_image", Section.text, "input_init_image"),
    ("active_deadline_seconds", Section.number, "active_deadline_seconds"),
    ("default_managed_settings", Section.text, "default_managed_settings"),
    ("egress_profile", Section.text, "egress_profile"),
    ("previous_attempt_timeout_seconds", Section.number, "previous_attempt_timeout"),
    ("image_pull_grace_seconds", Section.number, "image_pull_grace"),
    ("runtime_class", Section.text, "runtime_class"),
    ("auth_proxy", Section.text, "auth_proxy"),
    ("orphan_reaper_interval_seconds", Section.number, "orphan_reaper"),
)

TOP_KEYS: Final = (
    "image",
    "sandboxed",
    "sandbox",
    *(key for key, _, _ in _SIMPLE),
    "resources",
    "env",
    "image_pull_secrets",
    "pod_labels",
    "volumes",
    "pvc_volumes",
    "node_selector",
    "tolerations",
    "secret_env",
    "oauth_credentials_secret",
    "oauth_token_secret",
    "read_only_volumes",
    "managed_settings_presets",
    "claude_profiles",
    "cluster",
    "environment_volume",
    "session_volume",
    "relays",
    "egress",
    "egress_profiles",
)
_CLUSTER_KEYS: Final = ("kubeconfig", "kubeconfig_inline", "in_cluster", "context")
_SANDBOX_KEYS: Final = (
    "run_as_user",
    "writable_root",
    "home_size_limit",
    "tmp_size_limit",
    "deadline_margin_seconds",
    "sessions_claim",
)
_TOLERATION_KEYS: Final = ("key", "operator", "value", "effect", "toleration_seconds")
_ENV_VOLUME_KEYS: Final = ("mount_path", "size", "storage_class", "ttl_seconds")
_SESSION_VOLUME_KEYS: Final = ("storage_class", "size", "snapshot_class")


class ProviderBuilder(Protocol):
    """The builders a provider file maps to (``K8sEphemeralProvider`` has them all)."""

    def cluster_config(self, cluster: clusters.ClusterConfig) -> Self: ...
    def run_as_user(self, uid: int) -> Self: ...
    def allow_writable_root(self) -> Self: ...
    def home_size_limit(self, quantity: str) -> Self: ...
    def tmp_size_limit(self, quantity: str) -> Self: ...
    def deadline_margin(self, margin: float) -> Self: ...
    def conversations_volume(self, claim: str) -> Self: ...
    def resources(self, resources: K8sResources) -> Self: ...
    def env(self, name: str, value: str) -> Self: ...
    def image_pull_secret(self, name: str) -> Self: ...
    def pod_labels(self, pod_labels: Mapping[str, str]) -> Self: ...
    def node_selector(self, key: str, value: str) -> Self: ...
    def volume(self, host_path: str, mount_path: str) -> Self: ...
    def pvc_volume(self, claim: str, mount_path: str) -> Self: ...
    def toleration(self, toleration: Toleration) -> Self: ...
    def env_from_secret(self, var: str, secret: str, key: str) -> Self: ...
    def oauth_credentials_from_secret(self, secret: str, key: str) -> Self: ...
    def oauth_token_from_secret(self, secret: str, key: str) -> Self: ...
    def read_only_volume(self, volume: step_sandbox.ReadOnlyVolume) -> Self: ...
    def managed_settings_preset(self, name: str, configmap: str) -> Self: ...
    def environment_volume(self, volume: environments.EnvironmentVolume) -> Self: ...
    def session_volume(self, volume: SessionVolume) -> Self: ...
    def claude_profile_configmap_at(self, configmap: str, subdir: str) -> Self: ...
    def relays(self, specs: Sequence[relay_specs.RelaySpec]) -> Self: ...
    def egress(self, policy: egress_policy.EgressPolicy | None) -> Self: ...
    def egress_profiles(self, profiles: Mapping[str, egress_policy.EgressPolicy]) -> Self: ...


B = TypeVar("B", bound=ProviderBuilder)


def load(path: str | Path) -> Section:
    """The top section of the provider file at ``path`` (unreadable, bad YAML, unknown keys fail here)."""
    return generic_file.load(path, what="provider file", known=TOP_KEYS, refused=REFUSED_KEYS)


def top_section(data: Mapping[str, Any]) -> Section:
    """The top section of a mapping of provider settings (the file's schema)."""
    return Section(data, known=TOP_KEYS, refused=REFUSED_KEYS)


def read(top: Section, *, start: Callable[[str, bool], B], base: Path | None) -> B:
    """The builder chain a provider file describes; ``start(image, sandboxed)`` makes the first provider.

    ``top`` comes from :func:`load` or :func:`top_section`.
    """
    top.require("image")
    sandboxed = top.flag("sandboxed") if top.has("sandboxed") else top.has("sandbox")
    if top.has("sandbox") and not sandboxed:
        raise top.error("sandbox", "needs 'sandboxed: true' (or remove 'sandboxed: false')")
    p = start(top.text("image"), sandboxed)
    for key, read_value, builder in _SIMPLE:
        if top.has(key):
            p = getattr(p, builder)(read_value(top, key))
    for key, apply in _SECTIONS:
        if top.has(key):
            p = apply(p, top, base)
    return p


def _cluster(p: B, top: Section, base: Path | None) -> B:
    return p.cluster_config(_cluster_config(top.section("cluster", _CLUSTER_KEYS), base))


def _cluster_config(section: Section, base: Path | None) -> clusters.ClusterConfig:
    """``cluster:``: one source (``kubeconfig``, ``kubeconfig_inline``, ``in_cluster: true``)
    or none (the default kubeconfig), plus an optional ``context``."""
    in_cluster = section.flag("in_cluster") if section.has("in_cluster") else False
    sources = [k for k in ("kubeconfig", "kubeconfig_inline") if section.has(k)] + (
        ["in_cluster"] if in_cluster else []
    )
    if len(sources) > 1:
        raise errors.ConfigError(
            f"{section.path}: takes one of kubeconfig, kubeconfig_inline, in_cluster: true "
            f"(got {' and '.join(sources)})"
        )
    context = section.optional_text("context")
    if context is not None and not context.strip():
        raise section.error("context", "must not be empty; remove it for the current one")
    if in_cluster:
        if context is not None:
            raise section.error("context", "does not apply to in_cluster: true (a pod has one cluster)")
        return clusters.InCluster()
    if section.has("kubeconfig"):
        raw = section.text("kubeconfig")
        if not raw.strip():
            raise section.error("kubeconfig", "must be a path to a kubeconfig file")
        path = Path(raw).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        return clusters.KubeconfigFile(str(path), context)
    if section.has("kubeconfig_inline"):
        text = section.text("kubeconfig_inline")
        if not text.strip():
            raise section.error("kubeconfig_inline", "must hold a kubeconfig's YAML")
        return clusters.KubeconfigInline(text, context)
    return clusters.DefaultCluster(context)


def _sandbox(p: B, top: Section, _base: Path | None) -> B:
    sb = top.section("sandbox", _SANDBOX_KEYS)
    if sb.has("run_as_user"):
        p = p.run_as_user(sb.integer("run_as_user"))
    if sb.has("writable_root") and sb.flag("writable_root"):
        p = p.allow_writable_root()
    if sb.has("home_size_limit"):
        p = p.home_size_limit(sb.text("home_size_limit"))
    if sb.has("tmp_size_limit"):
        p = p.tmp_size_limit(sb.text("tmp_size_limit"))
    if sb.has("deadline_margin_seconds"):
        p = p.deadline_margin(sb.number("deadline_margin_seconds"))
    if sb.has("sessions_claim"):  # the wire name (shared with the reference): Claude Code's conversations
        p = p.conversations_volume(sb.text("sessions_claim"))
    return p


def _resources(p: B, top: Section, _base: Path | None) -> B:
    """Each key set replaces its default; ``none`` leaves that request or limit out."""
    names = [name for name, *_ in RESOURCE_FIELDS]
    res = top.section("resources", names)
    return p.resources(K8sResources.from_keys({name: res.text(name) for name in names if res.has(name)}))


def _env(p: B, top: Section, _base: Path | None) -> B:
    if isinstance(top.data["env"], Mapping):
        for name, value in top.str_map("env").items():
            p = p.env(name, value)
        return p
    for item in top.items("env", ("name", "value")):
        item.require("name", "value")
        p = p.env(item.text("name"), item.text("value"))
    return p


def _image_pull_secrets(p: B, top: Section, _base: Path | None) -> B:
    for name in top.str_list("image_pull_secrets"):
        p = p.image_pull_secret(name)
    return p


def _pod_labels(p: B, top: Section, _base: Path | None) -> B:
    return p.pod_labels(top.str_map("pod_labels"))


def _node_selector(p: B, top: Section, _base: Path | None) -> B:
    for key, value in top.str_map("node_selector").items():
        p = p.node_selector(key, value)
    return p


def _volumes(p: B, top: Section, _base: Path | None) -> B:
    for item in top.items("volumes", ("host_path", "mount_path")):
        item.require("host_path", "mount_path")
        p = p.volume(item.text("host_path"), item.text("mount_path"))
    return p


def _pvc_volumes(p: B, top: Section, _base: Path | None) -> B:
    for item in top.items("pvc_volumes", ("claim_name", "mount_path")):
        item.require("claim_name", "mount_path")
        p = p.pvc_volume(item.text("claim_name"), item.text("mount_path"))
    return p


def _tolerations(p: B, top: Section, _base: Path | None) -> B:
    for item in top.items("tolerations", _TOLERATION_KEYS):
        p = p.toleration(
            Toleration(
                key=item.optional_text("key"),
                operator=item.optional_text("operator"),
                value=item.optional_text("value"),
                effect=item.optional_text("effect"),
                toleration_seconds=item.optional_integer("toleration_seconds"),
            )
        )
    return p


def _secret_env(p: B, top: Section, _base: Path | None) -> B:
    for item in top.items("secret_env", ("name", "secret", "key")):
        item.require("name", "secret", "key")
        p = p.env_from_secret(item.text("name"), item.text("secret"), item.text("key"))
    return p


def _secret_ref(top: Section, key: str) -> tuple[str, str]:
    ref = top.section(key, ("secret", "key"))
    ref.require("secret", "key")
    return ref.text("secret"), ref.text("key")


def _oauth_credentials_secret(p: B, top: Section, _base: Path | None) -> B:
    return p.oauth_credentials_from_secret(*_secret_ref(top, "oauth_credentials_secret"))


def _oauth_token_secret(p: B, top: Section, _base: Path | None) -> B:
    return p.oauth_token_from_secret(*_secret_ref(top, "oauth_token_secret"))


def _read_only_volumes(p: B, top: Section, _base: Path | None) -> B:
    for item in top.items("read_only_volumes", step_sandbox.READ_ONLY_VOLUME_KEYS):
        p = p.read_only_volume(step_sandbox.read_only_volume_from(item))
    return p


def _managed_settings_presets(p: B, top: Section, _base: Path | None) -> B:
    for name, configmap in top.str_map("managed_settings_presets").items():
        p = p.managed_settings_preset(name, configmap)
    return p


def _environment_volume(p: B, top: Section, _base: Path | None) -> B:
    env = top.section("environment_volume", _ENV_VOLUME_KEYS)
    env.require("mount_path")
    ttl = (
        timedelta(seconds=env.number("ttl_seconds")) if env.has("ttl_seconds") else environments.DEFAULT_ENVIRONMENT_TTL
    )
    volume = environments.EnvironmentVolume(
        env.text("mount_path"),
        size=env.text("size") if env.has("size") else environments.DEFAULT_ENVIRONMENT_SIZE,
        storage_class=env.optional_text("storage_class"),
        ttl=ttl,
    )
    return p.environment_volume(volume)


def _session_volume(p: B, top: Section, _base: Path | None) -> B:
    section = top.section("session_volume", _SESSION_VOLUME_KEYS)
    section.require("storage_class")
    size = section.text("size") if section.has("size") else DEFAULT_SESSION_VOLUME_SIZE
    volume = SessionVolume(
        section.text("storage_class"), size=size, snapshot_class=section.optional_text("snapshot_class")
    )
    return p.session_volume(volume)


def _claude_profiles(p: B, top: Section, _base: Path | None) -> B:
    for item in top.items("claude_profiles", ("configmap", "subdir")):
        item.require("configmap")
        p = p.claude_profile_configmap_at(item.text("configmap"), item.text("subdir") if item.has("subdir") else "")
    return p


def _relays(p: B, top: Section, _base: Path | None) -> B:
    return p.relays(relay_specs.parse_relays(top, "secret"))


def _egress(p: B, top: Section, _base: Path | None) -> B:
    """``egress:`` with the file's own ``egress_profiles:`` (read together: one may name the other)."""
    found, profiles = egress_options.file_policy(
        top.data["egress"], top.data.get("egress_profiles"), source="provider file"
    )
    return p.egress(found).egress_profiles(profiles)


def _egress_profiles(p: B, top: Section, _base: Path | None) -> B:
    """``egress_profiles:`` without ``egress:`` opens nothing for a step, but a command's
    ``--egress-profile`` may name them (read with ``egress:`` when there is one)."""
    if top.has("egress"):
        return p
    _, profiles = egress_options.file_policy({}, top.data["egress_profiles"], source="provider file")
    return p.egress_profiles(profiles)


#: Keys with more than one value, in the order the builders apply them (as the file documents).
_SECTIONS: Final[tuple[tuple[str, Callable[[Any, Section, Path | None], Any]], ...]] = (
    ("cluster", _cluster),
    ("sandbox", _sandbox),
    ("resources", _resources),
    ("env", _env),
    ("image_pull_secrets", _image_pull_secrets),
    ("pod_labels", _pod_labels),
    ("node_selector", _node_selector),
    ("volumes", _volumes),
    ("pvc_volumes", _pvc_volumes),
    ("tolerations", _tolerations),
    ("secret_env", _secret_env),
    ("oauth_credentials_secret", _oauth_credentials_secret),
    ("oauth_token_secret", _oauth_token_secret),
    ("read_only_volumes", _read_only_volumes),
    ("managed_settings_presets", _managed_settings_presets),
    ("environment_volume", _environment_volume),
    ("session_volume", _session_volume),
    ("claude_profiles", _claude_profiles),
    ("relays", _relays),
    ("egress", _egress),
    ("egress_profiles", _egress_profiles),
)
