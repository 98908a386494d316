"""K8sEphemeralProvider as configuration: builders, invocation-time merging and refusals.

Counterparts of the reference's ``k8s/ephemeral.rs`` unit tests (the [newest]
environment-volume cases are in ``test_k8s_environments.py``). Every pod
rendered here is validated strictly for Kubernetes 1.30 and 1.37.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ironflow import AgentConfig, errors, labels
from ironflow.k8s import K8sEphemeralProvider, K8sResources, SandboxSettings, Toleration, step_manifests
from ironflow.k8s.settings import ImagePullPolicy
from ironflow.step_sandbox import ConfigMapSource, HostPathSource, PvcSource, ReadOnlyVolume, SecretEnvVar
from ironflow.testing.k8s_validate import validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
NOW = 1_700_000_000


def render(p: K8sEphemeralProvider, cfg: AgentConfig | None = None, **kw: Any) -> list[dict[str, Any]]:
    objs = p.manifests(cfg or AgentConfig("hello"), now=NOW, pod_name="claude-code-test-00000001", **kw)
    validate_manifests(objs)
    return objs


def pod_of(p: K8sEphemeralProvider, cfg: AgentConfig | None = None, **kw: Any) -> dict[str, Any]:
    return render(p, cfg, **kw)[-1]


def env_of(pod: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = pod["spec"]["containers"][0]["env"]
    return env


def refused(p: K8sEphemeralProvider, cfg: AgentConfig | None = None) -> str:
    with pytest.raises(errors.StepConfigError) as info:
        p.manifests(cfg or AgentConfig("hello"), now=NOW)
    return info.value.message


def test_ephemeral_provider_defaults() -> None:
    s = K8sEphemeralProvider(IMAGE).settings
    assert (s.image, s.namespace, s.claude_path, s.working_dir) == (IMAGE, "default", "claude", None)
    assert s.resources == K8sResources()
    assert s.resources.render() == {
        "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
        "limits": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "10Gi"},
    }
    assert s.image_pull_policy is ImagePullPolicy.IF_NOT_PRESENT
    assert s.env_vars == ()
    assert s.image_pull_secrets == ()
    assert s.oauth_credentials is None
    assert s.timeout_s == 300
    assert s.input_init_image == "curlimages/curl:8.10.1"
    assert s.sandbox is None
    assert s.active_deadline_s is None
    assert s.runtime_class is None
    assert s.previous_attempt_timeout_s == 60
    assert s.auth_proxy_url is None
    assert s.cluster is None


def test_ephemeral_provider_builder_chain() -> None:
    p = (
        K8sEphemeralProvider(IMAGE)
        .namespace("agents")
        .claude_path("/usr/local/bin/claude")
        .working_dir("/work")
        .resources(K8sResources(cpu_limit="4", memory_limit="8Gi", ephemeral_storage_request=None))
        .service_account("runner")
        .image_pull_policy("Always")
        .env("A", "1")
        .timeout(timedelta(minutes=10))
        .input_init_image("curl:1")
    )
    s = p.settings
    assert (s.namespace, s.claude_path, s.working_dir, s.service_account) == (
        "agents",
        "/usr/local/bin/claude",
        "/work",
        "runner",
    )
    assert s.image_pull_policy is ImagePullPolicy.ALWAYS
    assert s.timeout_s == 600
    assert s.env_vars == (("A", "1"),)
    container = pod_of(p)["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi"},
    }
    assert container["imagePullPolicy"] == "Always"
    assert container["command"][2].startswith("cd '/work' && '/usr/local/bin/claude' ")


def test_ephemeral_provider_image_pull_secrets() -> None:
    p = K8sEphemeralProvider(IMAGE).image_pull_secret("a").image_pull_secret("b")
    assert p.settings.image_pull_secrets == ("a", "b")
    assert pod_of(p)["spec"]["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]


def test_ephemeral_provider_clone() -> None:
    """Builders return a new provider; the original never changes (the Rust clone case)."""
    base = K8sEphemeralProvider(IMAGE)
    changed = base.namespace("x").pod_label("team", "a").env("A", "1")
    assert base.settings.namespace == "default"
    assert dict(base.settings.pod_labels) == {}
    assert changed.settings.namespace == "x"
    assert changed is not base
    assert base == K8sEphemeralProvider(IMAGE)


def test_ephemeral_provider_pod_labels_default_empty() -> None:
    assert dict(K8sEphemeralProvider(IMAGE).settings.pod_labels) == {}


def test_ephemeral_provider_pod_labels_builder() -> None:
    p = K8sEphemeralProvider(IMAGE).pod_label("old", "x").pod_labels({"team": "a", "tier": "b"})
    assert dict(p.settings.pod_labels) == {"team": "a", "tier": "b"}


def test_ephemeral_provider_pod_label_builder() -> None:
    p = K8sEphemeralProvider(IMAGE).pod_label("team", "a").pod_label("tier", "b")
    assert dict(p.settings.pod_labels) == {"team": "a", "tier": "b"}
    assert pod_of(p)["metadata"]["labels"]["team"] == "a"


def test_ephemeral_provider_volume_builder() -> None:
    p = K8sEphemeralProvider(IMAGE).volume("/srv/repos", "/repos")
    assert p.settings.volumes == (("/srv/repos", "/repos"),)


def test_ephemeral_provider_volumes_default_empty() -> None:
    assert K8sEphemeralProvider(IMAGE).settings.volumes == ()


def test_ephemeral_provider_pvc_volume_builder() -> None:
    p = K8sEphemeralProvider(IMAGE).pvc_volume("cache", "/cache").pvc_volume("data", "/data")
    assert p.settings.pvc_volumes == (("cache", "/cache"), ("data", "/data"))


def test_ephemeral_provider_pvc_volumes_default_empty() -> None:
    assert K8sEphemeralProvider(IMAGE).settings.pvc_volumes == ()


def test_ephemeral_provider_node_selector_default_empty() -> None:
    assert dict(K8sEphemeralProvider(IMAGE).settings.node_selector) == {}
    assert "nodeSelector" not in pod_of(K8sEphemeralProvider(IMAGE))["spec"]


def test_ephemeral_provider_node_selector_accumulates() -> None:
    p = K8sEphemeralProvider(IMAGE).node_selector("pool", "agents").node_selector("zone", "a")
    assert pod_of(p)["spec"]["nodeSelector"] == {"pool": "agents", "zone": "a"}


def test_ephemeral_provider_toleration_default_empty() -> None:
    assert K8sEphemeralProvider(IMAGE).settings.tolerations == ()


def test_ephemeral_provider_toleration_accumulates() -> None:
    p = (
        K8sEphemeralProvider(IMAGE)
        .toleration(Toleration(key="dedicated", operator="Equal", value="agents", effect="NoSchedule"))
        .toleration(Toleration(operator="Exists"))
    )
    assert pod_of(p)["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ]


def test_toleration_refuses_settings_that_cannot_work() -> None:
    with pytest.raises(errors.ConfigError, match="operator Exists must not have a value"):
        Toleration(key="k", operator="Exists", value="v")
    with pytest.raises(errors.ConfigError, match="effect must be one of"):
        Toleration(key="k", effect="Sometimes")


def test_ephemeral_provider_active_deadline_default_and_builder() -> None:
    assert K8sEphemeralProvider(IMAGE).settings.active_deadline_s is None
    assert K8sEphemeralProvider(IMAGE).active_deadline_seconds(90).settings.active_deadline_s == 90


def test_apply_active_deadline_sets_field_in_seconds() -> None:
    p = K8sEphemeralProvider(IMAGE).active_deadline_seconds(timedelta(seconds=90, milliseconds=700))
    assert pod_of(p)["spec"]["activeDeadlineSeconds"] == 90


def test_apply_active_deadline_none_leaves_field_absent() -> None:
    assert "activeDeadlineSeconds" not in pod_of(K8sEphemeralProvider(IMAGE))["spec"]


def test_k8s_runtime_class_default_is_none_and_builder_stores_value() -> None:
    assert K8sEphemeralProvider(IMAGE).settings.runtime_class is None
    assert K8sEphemeralProvider(IMAGE).runtime_class("gvisor").settings.runtime_class == "gvisor"


def test_k8s_runtime_class_blank_builder_panics() -> None:
    with pytest.raises(errors.ConfigError, match=r"^runtime class must not be empty$"):
        K8sEphemeralProvider(IMAGE).runtime_class("  ")


def test_k8s_merged_step_runtime_class_overrides_provider() -> None:
    p = K8sEphemeralProvider(IMAGE).runtime_class("gvisor")
    assert pod_of(p, AgentConfig("hi").runtime_class("kata"))["spec"]["runtimeClassName"] == "kata"


def test_k8s_merged_blank_step_runtime_class_is_an_error() -> None:
    p = K8sEphemeralProvider(IMAGE).runtime_class("gvisor")
    assert refused(p, AgentConfig("hi").runtime_class(" ")) == "runtime class must not be empty"


def test_k8s_apply_runtime_class_sets_runtime_class_name() -> None:
    assert pod_of(K8sEphemeralProvider(IMAGE).runtime_class("gvisor"))["spec"]["runtimeClassName"] == "gvisor"


def test_k8s_apply_runtime_class_none_leaves_field_absent() -> None:
    assert "runtimeClassName" not in pod_of(K8sEphemeralProvider(IMAGE))["spec"]


def test_sandboxed_defaults() -> None:
    s = K8sEphemeralProvider.sandboxed(IMAGE).settings.sandbox
    assert s == SandboxSettings(10001, False, "1Gi", "512Mi", 60.0)


def test_sandboxed_relaxation_builders() -> None:
    p = (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .allow_writable_root()
        .home_size_limit("4Gi")
        .tmp_size_limit("2Gi")
        .deadline_margin(timedelta(seconds=30))
        .run_as_user(20000)
    )
    assert p.settings.sandbox == SandboxSettings(20000, True, "4Gi", "2Gi", 30.0)
    spec = pod_of(p)["spec"]
    assert spec["securityContext"]["runAsUser"] == 20000
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False
    assert spec["activeDeadlineSeconds"] == 330


@pytest.mark.parametrize(
    ("method", "call"),
    [
        ("allow_writable_root", lambda p: p.allow_writable_root()),
        ("home_size_limit", lambda p: p.home_size_limit("2Gi")),
        ("tmp_size_limit", lambda p: p.tmp_size_limit("2Gi")),
        ("deadline_margin", lambda p: p.deadline_margin(5)),
        ("run_as_user", lambda p: p.run_as_user(5)),
    ],
)
def test_relaxations_on_non_sandboxed_panic(method: str, call: Any) -> None:
    """allow_writable_root_on_non_sandboxed_panics, home_size_limit_on_non_sandboxed_panics and the others."""
    with pytest.raises(errors.ConfigError) as info:
        call(K8sEphemeralProvider(IMAGE))
    assert info.value.message == f"{method} requires a provider built with K8sEphemeralProvider.sandboxed"


def test_allow_writable_root_on_non_sandboxed_panics() -> None:
    with pytest.raises(errors.ConfigError, match="allow_writable_root requires a provider built with"):
        K8sEphemeralProvider(IMAGE).allow_writable_root()


def test_home_size_limit_on_non_sandboxed_panics() -> None:
    with pytest.raises(errors.ConfigError, match="home_size_limit requires a provider built with"):
        K8sEphemeralProvider(IMAGE).home_size_limit("1Gi")


def test_sessions_volume_builder_stores_claim_for_session_id() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).conversations_volume("sessions")
    assert p.settings.conversations_claim == "sessions"
    spec = pod_of(p, AgentConfig("hi").replace(session_id="abc-1"))["spec"]
    assert {"name": "ironflow-sessions", "persistentVolumeClaim": {"claimName": "sessions"}} in spec["volumes"]
    assert "'--session-id' 'abc-1'" in spec["containers"][0]["command"][2]


def test_sessions_volume_on_non_sandboxed_panics() -> None:
    with pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider(IMAGE).conversations_volume("sessions")
    assert info.value.message == "conversations_volume requires a provider built with K8sEphemeralProvider.sandboxed"


def test_sessions_volume_empty_claim_panics() -> None:
    """The empty-claim check comes before the sandbox check."""
    with pytest.raises(errors.ConfigError, match=r"^conversations_volume claim name must not be empty$"):
        K8sEphemeralProvider(IMAGE).conversations_volume("")


def test_sessions_volume_is_the_old_name_it_warns_and_keeps_the_references_texts() -> None:
    renamed = r"K8sEphemeralProvider\.sessions_volume is renamed conversations_volume"
    with pytest.warns(DeprecationWarning, match=renamed):
        p = K8sEphemeralProvider.sandboxed(IMAGE).sessions_volume("sessions")
    assert p.settings == K8sEphemeralProvider.sandboxed(IMAGE).conversations_volume("sessions").settings
    with pytest.warns(DeprecationWarning, match=renamed), pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider(IMAGE).sessions_volume("sessions")
    assert info.value.message == "sessions_volume requires a provider built with K8sEphemeralProvider.sandboxed"
    empty = r"^sessions_volume claim name must not be empty$"
    with pytest.warns(DeprecationWarning, match=renamed), pytest.raises(errors.ConfigError, match=empty):
        K8sEphemeralProvider(IMAGE).sessions_volume("")


def test_settings_sessions_claim_is_the_old_name_of_conversations_claim() -> None:
    settings = K8sEphemeralProvider.sandboxed(IMAGE).conversations_volume("c").settings
    with pytest.warns(DeprecationWarning, match=r"ProviderSettings\.sessions_claim is renamed conversations_claim"):
        assert settings.sessions_claim == "c"


def test_run_as_user_zero_panics() -> None:
    """Checked before the sandbox check: a non-sandboxed provider gets the uid message."""
    for p in (K8sEphemeralProvider(IMAGE), K8sEphemeralProvider.sandboxed(IMAGE)):
        with pytest.raises(errors.ConfigError, match=r"^run_as_user must be greater than 0$"):
            p.run_as_user(0)


def test_oauth_token_from_secret_builder() -> None:
    p = K8sEphemeralProvider(IMAGE).oauth_token_from_secret("claude", "token")
    assert p.settings.secret_env == (SecretEnvVar("CLAUDE_CODE_OAUTH_TOKEN", "claude", "token"),)
    assert {
        "name": "CLAUDE_CODE_OAUTH_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "claude", "key": "token"}},
    } in env_of(pod_of(p))


def test_oauth_credentials_from_secret_adds_credentials_env() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).oauth_credentials_from_secret("claude-creds", "credentials.json")
    pod = pod_of(p)
    assert {
        "name": "IRONFLOW_CLAUDE_CREDENTIALS",
        "valueFrom": {"secretKeyRef": {"name": "claude-creds", "key": "credentials.json"}},
    } in env_of(pod)
    assert (
        '"$IRONFLOW_CLAUDE_CREDENTIALS" > "$HOME/.claude/.credentials.json"'
        in pod["spec"]["containers"][0]["command"][2]
    )


def test_env_from_secret_replaces_same_var() -> None:
    p = K8sEphemeralProvider(IMAGE).env_from_secret("GH", "a", "k").env_from_secret("X", "x", "k")
    p = p.env_from_secret("GH", "b", "k2")
    assert p.settings.secret_env == (SecretEnvVar("GH", "b", "k2"), SecretEnvVar("X", "x", "k"))


def test_managed_settings_preset_map() -> None:
    p = K8sEphemeralProvider(IMAGE).managed_settings_preset("strict", "ms-strict").managed_settings_preset("open", "o")
    p = p.managed_settings_preset("strict", "ms-strict-v2")
    assert dict(p.settings.managed_settings_presets) == {"strict": "ms-strict-v2", "open": "o"}


def test_other_sandbox_builders() -> None:
    p = (
        K8sEphemeralProvider.sandboxed(IMAGE)
        .read_only_pvc("repos", "/data/repos")
        .egress_profile("github")
        .previous_attempt_timeout(timedelta(seconds=5))
        .auth_proxy_admin_key("admin-key-value")
        .default_managed_settings("strict")
    )
    s = p.settings
    assert s.read_only_volumes == (ReadOnlyVolume(PvcSource("repos"), "/data/repos"),)
    assert s.egress_profile == "github"
    assert s.previous_attempt_timeout_s == 5
    assert s.default_managed_settings == "strict"
    assert s.auth_proxy_admin_key is not None
    assert s.auth_proxy_admin_key.reveal() == "admin-key-value"
    assert "admin-key-value" not in repr(p)


def test_merged_step_secret_overrides_provider_secret() -> None:
    p = K8sEphemeralProvider(IMAGE).env_from_secret("GH", "provider", "k").env_from_secret("B", "b", "k")
    merged = step_manifests.merged_pod_inputs(p.settings, AgentConfig("hi").env_from_secret("GH", "step", "k2"))
    assert merged.secret_env == (SecretEnvVar("GH", "step", "k2"), SecretEnvVar("B", "b", "k"))


def test_merged_step_service_account_overrides_provider() -> None:
    p = K8sEphemeralProvider(IMAGE).service_account("provider-sa")
    assert pod_of(p, AgentConfig("hi").service_account("step-sa"))["spec"]["serviceAccountName"] == "step-sa"
    assert pod_of(p)["spec"]["serviceAccountName"] == "provider-sa"


def test_merged_provider_volumes_kept_without_flag() -> None:
    p = K8sEphemeralProvider(IMAGE).volume("/srv", "/srv").pvc_volume("cache", "/cache")
    merged = step_manifests.merged_pod_inputs(p.settings, AgentConfig("hi"))
    assert merged.host_volumes == (("/srv", "/srv"),)
    assert merged.pvc_volumes == (("cache", "/cache"),)


def test_merged_without_provider_volumes_drops_them() -> None:
    p = K8sEphemeralProvider(IMAGE).volume("/srv", "/srv").pvc_volume("cache", "/cache")
    merged = step_manifests.merged_pod_inputs(p.settings, AgentConfig("hi").without_provider_volumes())
    assert merged.host_volumes == ()
    assert merged.pvc_volumes == ()


def test_merged_step_pvc_volumes_keep_provider_ones() -> None:
    p = K8sEphemeralProvider(IMAGE).pvc_volume("cache", "/cache")
    volumes = pod_of(p, AgentConfig("hi").pvc_volume("work", "/work"))["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["pvc-0", "step-pvc-0"]


def test_pod_spec_without_provider_volumes_keeps_home_and_tmp() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).volume("/srv", "/srv").pvc_volume("cache", "/cache")
    spec = pod_of(p, AgentConfig("hi").without_provider_volumes())["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["ironflow-home", "ironflow-tmp"]


def test_merged_read_only_volumes_provider_then_step() -> None:
    p = K8sEphemeralProvider(IMAGE).read_only_pvc("repos", "/repos")
    merged = step_manifests.merged_pod_inputs(p.settings, AgentConfig("hi").read_only_config_map("cfg", "/cfg"))
    assert merged.read_only_volumes == (
        ReadOnlyVolume(PvcSource("repos"), "/repos"),
        ReadOnlyVolume(ConfigMapSource("cfg"), "/cfg"),
    )


def test_merged_unknown_preset_is_an_error() -> None:
    p = K8sEphemeralProvider(IMAGE).managed_settings_preset("strict", "a").managed_settings_preset("open", "b")
    assert refused(p, AgentConfig("hi").managed_settings("nope")) == (
        "unknown managed settings preset 'nope', known presets: [open, strict]"
    )


def test_merged_unknown_default_preset_is_an_error() -> None:
    p = K8sEphemeralProvider(IMAGE).default_managed_settings("missing")
    assert refused(p) == "unknown managed settings preset 'missing', known presets: []"


def test_merged_default_preset_used_when_step_has_none() -> None:
    p = K8sEphemeralProvider(IMAGE).managed_settings_preset("strict", "ms-strict").default_managed_settings("strict")
    volumes = pod_of(p)["spec"]["volumes"]
    assert volumes == [
        {
            "name": "ironflow-managed-settings",
            "configMap": {
                "name": "ms-strict",
                "items": [{"key": "managed-settings.json", "path": "managed-settings.json"}],
            },
        }
    ]


def test_merged_no_preset_means_no_managed_settings() -> None:
    p = K8sEphemeralProvider(IMAGE).managed_settings_preset("strict", "ms-strict")
    assert step_manifests.merged_pod_inputs(p.settings, AgentConfig("hi")).managed_settings_configmap is None


def test_merged_step_egress_label_overrides_provider() -> None:
    p = K8sEphemeralProvider(IMAGE).egress_profile("none")
    assert pod_of(p)["metadata"]["labels"][labels.LABEL_EGRESS_PROFILE] == "none"
    pod = pod_of(p, AgentConfig("hi").egress_profile("github"))
    assert pod["metadata"]["labels"][labels.LABEL_EGRESS_PROFILE] == "github"


def test_merged_labels_carry_run_scope() -> None:
    pod = pod_of(K8sEphemeralProvider(IMAGE), AgentConfig("hi").scoped("run-1", "fix bug/42"))
    assert pod["metadata"]["labels"][labels.LABEL_RUN_ID] == "run-1"
    assert pod["metadata"]["labels"][labels.LABEL_STEP] == labels.sanitize_label_value("fix bug/42")


def test_sandboxed_refuses_inline_oauth_credentials() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).oauth_credentials('{"token": "x"}')
    assert refused(p) == "sandboxed provider refuses inline oauth_credentials; use oauth_credentials_from_secret"


def test_sandboxed_refuses_plain_api_key() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).env("ANTHROPIC_API_KEY", "k")
    assert refused(p) == "sandboxed provider refuses ANTHROPIC_API_KEY as a plain env var; use env_from_secret"


def test_sandboxed_refuses_plain_oauth_token() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).env("CLAUDE_CODE_OAUTH_TOKEN", "t")
    assert refused(p) == "sandboxed provider refuses CLAUDE_CODE_OAUTH_TOKEN as a plain env var; use env_from_secret"


def test_non_sandboxed_keeps_inline_credentials() -> None:
    p = K8sEphemeralProvider(IMAGE).oauth_credentials('{"a":"it\'s"}').env("ANTHROPIC_API_KEY", "k")
    pod = pod_of(p)
    script = pod["spec"]["containers"][0]["command"][2]
    assert script.startswith("mkdir -p $HOME/.claude && printf '%s' '{\"a\":\"it'\\''s\"}' > ")
    assert {"name": "ANTHROPIC_API_KEY", "value": "k"} in env_of(pod)


def test_effective_deadline_explicit_value_wins() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).active_deadline_seconds(42)
    assert step_manifests.active_deadline_seconds(p.settings) == 42
    assert pod_of(p)["metadata"]["annotations"] == {labels.ANNOTATION_EXPIRES_AT: str(NOW + 360)}


def test_effective_deadline_sandboxed_is_timeout_plus_margin() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).timeout(100).deadline_margin(20)
    assert step_manifests.active_deadline_seconds(p.settings) == 120
    assert pod_of(p)["metadata"]["annotations"][labels.ANNOTATION_EXPIRES_AT] == str(NOW + 120)


def test_effective_deadline_non_sandboxed_defaults_to_none() -> None:
    assert step_manifests.active_deadline_seconds(K8sEphemeralProvider(IMAGE).settings) is None


def test_deadline_margin_defaults_to_sixty_seconds_when_not_sandboxed() -> None:
    p = K8sEphemeralProvider(IMAGE).timeout(100)
    assert step_manifests.lifetime_seconds(p.settings) == 160
    assert pod_of(p)["metadata"]["annotations"][labels.ANNOTATION_EXPIRES_AT] == str(NOW + 160)


def test_spawn_orphan_reaper_zero_interval_panics() -> None:
    with pytest.raises(errors.ConfigError, match=r"^orphan reaper interval must be greater than zero$"):
        K8sEphemeralProvider(IMAGE).orphan_reaper(0)
    assert K8sEphemeralProvider(IMAGE).orphan_reaper(30).settings.orphan_reaper_interval_s == 30


def test_auth_proxy_builder_sets_url_and_trims_slash() -> None:
    assert K8sEphemeralProvider(IMAGE).auth_proxy("http://proxy:8080/").settings.auth_proxy_url == "http://proxy:8080"


def test_auth_proxy_invalid_url_panics() -> None:
    with pytest.raises(errors.ConfigError, match=r"^auth_proxy url must start with http:// or https://$"):
        K8sEphemeralProvider(IMAGE).auth_proxy("proxy:8080")


def test_auth_proxy_client_is_none_without_proxy() -> None:
    """Without a proxy there is nothing to issue tokens: a token is refused, no account kind."""
    p = K8sEphemeralProvider(IMAGE)
    with pytest.raises(errors.ConfigError, match="proxy_token needs a provider with auth_proxy"):
        p.manifests(AgentConfig("hi"), now=NOW, proxy_token="ifap_x")
    assert p.account_kind() is None


def test_auth_proxy_rejects_oauth_token_from_secret() -> None:
    p = K8sEphemeralProvider(IMAGE).auth_proxy("http://proxy").oauth_token_from_secret("s", "k")
    assert refused(p) == (
        "auth_proxy is set: the pod must not receive CLAUDE_CODE_OAUTH_TOKEN; the proxy injects the credential"
    )


def test_auth_proxy_rejects_step_secret_env_oauth_token() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).auth_proxy("http://proxy")
    msg = refused(p, AgentConfig("hi").env_from_secret("ANTHROPIC_API_KEY", "s", "k"))
    assert msg == "auth_proxy is set: the pod must not receive ANTHROPIC_API_KEY; the proxy injects the credential"


def test_auth_proxy_rejects_inline_oauth_credentials() -> None:
    p = K8sEphemeralProvider(IMAGE).auth_proxy("http://proxy").oauth_credentials("{}")
    assert "must not receive oauth_credentials" in refused(p)
    p2 = K8sEphemeralProvider(IMAGE).auth_proxy("http://proxy").oauth_credentials_from_secret("s", "k")
    assert "must not receive IRONFLOW_CLAUDE_CREDENTIALS" in refused(p2)


def test_auth_proxy_rejects_sk_ant_plain_value() -> None:
    value = "sk-ant-oat01-very-secret"
    p = K8sEphemeralProvider(IMAGE).auth_proxy("http://proxy").env("SOME_TOKEN", value)
    with pytest.raises(errors.StepConfigError) as info:
        p.manifests(AgentConfig("hi"), now=NOW)
    assert "must not receive SOME_TOKEN" in info.value.message
    assert value not in str(info.value)
    assert value not in repr(info.value)


def test_auth_proxy_pod_env_has_base_url_and_opaque_token_only() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).auth_proxy("https://proxy.ironflow/").env("TEAM", "a")
    env = env_of(pod_of(p, proxy_token="ifap_opaque123"))
    assert env == [
        {"name": "IRONFLOW_ALLOW_BYPASS", "value": ""},
        {"name": "TEAM", "value": "a"},
        {"name": "ANTHROPIC_BASE_URL", "value": "https://proxy.ironflow"},
        {"name": "ANTHROPIC_AUTH_TOKEN", "value": "ifap_opaque123"},
        {"name": "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "value": "1"},
        {"name": "HOME", "value": "/home/claude"},
        {"name": "TMPDIR", "value": "/tmp"},
    ]


def test_auth_proxy_account_kind_is_subscription_only_with_proxy() -> None:
    assert K8sEphemeralProvider(IMAGE).auth_proxy("http://p").account_kind() == "claude_subscription"
    assert K8sEphemeralProvider.sandboxed(IMAGE).account_kind() is None


def test_non_proxy_pod_env_unchanged() -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).env("TEAM", "a")
    names = [e["name"] for e in env_of(pod_of(p))]
    assert names == ["IRONFLOW_ALLOW_BYPASS", "TEAM", "HOME", "TMPDIR"]


def test_read_only_host_path_builder_renders_directory_host_path() -> None:
    p = K8sEphemeralProvider(IMAGE).read_only_host_path("/srv/ref", "/ref")
    assert p.settings.read_only_volumes == (ReadOnlyVolume(HostPathSource("/srv/ref"), "/ref"),)
    assert pod_of(p)["spec"]["volumes"] == [{"name": "ro-0", "hostPath": {"path": "/srv/ref", "type": "Directory"}}]


def test_builders_refuse_values_that_can_never_work() -> None:
    with pytest.raises(errors.ConfigError, match="image must not be empty"):
        K8sEphemeralProvider(" ")
    with pytest.raises(errors.ConfigError, match="timeout must be a finite number of seconds > 0"):
        K8sEphemeralProvider(IMAGE).timeout(0)
    with pytest.raises(errors.ConfigError, match="image_pull_policy must be one of Always, IfNotPresent, Never"):
        K8sEphemeralProvider(IMAGE).image_pull_policy("Sometimes")
