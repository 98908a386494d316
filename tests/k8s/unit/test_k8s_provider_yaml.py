"""K8sEphemeralProvider.from_file / from_dict: the YAML schema, and refusals that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ironflow import AgentConfig, errors
from ironflow.k8s import ClaudeProfile, K8sEphemeralProvider, K8sResources, SandboxSettings, Toleration
from ironflow.step_sandbox import ConfigMapSource, HostPathSource, PvcSource, ReadOnlyVolume, SecretEnvVar
from ironflow.testing.k8s_validate import validate_manifests

FULL = """
image: ghcr.io/acme/claude-runner:2.1.332-1
sandboxed: true
sandbox:
  run_as_user: 20000
  writable_root: false
  home_size_limit: 2Gi
  tmp_size_limit: 256Mi
  deadline_margin_seconds: 30
  sessions_claim: claude-sessions
namespace: agents
claude_path: /usr/local/bin/claude
working_dir: /work
resources: {cpu_limit: "2", memory_limit: 4Gi, ephemeral_storage_limit: none}
service_account: agent-reader
image_pull_policy: Always
env:
  - {name: TEAM, value: infra}
  - {name: LOG, value: debug}
image_pull_secrets: [regcred]
timeout_seconds: 900
pod_labels: {team: infra}
volumes: [{host_path: /srv/tools, mount_path: /tools}]
pvc_volumes: [{claim_name: cache, mount_path: /cache}]
input_init_image: curlimages/curl:8.11.0
node_selector: {pool: agents}
tolerations:
  - {key: dedicated, operator: Equal, value: agents, effect: NoSchedule}
active_deadline_seconds: 1200
secret_env:
  - {name: GH_TOKEN, secret: github, key: token}
oauth_credentials_secret: {secret: claude-creds, key: credentials.json}
read_only_volumes:
  - {pvc: repos, mount_path: /data/repos}
  - {config_map: rules, mount_path: /etc/rules, sub_path: rules.md}
  - {host_path: /srv/ref, mount_path: /ref}
managed_settings_presets: {strict: ms-strict}
default_managed_settings: strict
claude_profiles:
  - {configmap: claude-profile}
  - {configmap: claude-profile-rules, subdir: rules}
egress_profile: anthropic-only
previous_attempt_timeout_seconds: 30
runtime_class: gvisor
orphan_reaper_interval_seconds: 120
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "provider.yaml"
    path.write_text(text)
    return path


def test_every_documented_key_reaches_its_setting(tmp_path: Path) -> None:
    s = K8sEphemeralProvider.from_file(write(tmp_path, FULL)).settings
    assert s.sandbox == SandboxSettings(20000, False, "2Gi", "256Mi", 30.0)
    assert s.conversations_claim == "claude-sessions"
    assert (s.namespace, s.claude_path, s.working_dir, s.service_account) == (
        "agents",
        "/usr/local/bin/claude",
        "/work",
        "agent-reader",
    )
    assert s.resources == K8sResources(cpu_limit="2", memory_limit="4Gi", ephemeral_storage_limit=None)
    assert s.env_vars == (("TEAM", "infra"), ("LOG", "debug"))
    assert s.image_pull_secrets == ("regcred",)
    assert s.timeout_s == 900
    assert dict(s.pod_labels) == {"team": "infra"}
    assert s.volumes == (("/srv/tools", "/tools"),)
    assert s.pvc_volumes == (("cache", "/cache"),)
    assert s.input_init_image == "curlimages/curl:8.11.0"
    assert dict(s.node_selector) == {"pool": "agents"}
    assert s.tolerations == (Toleration("dedicated", "Equal", "agents", "NoSchedule"),)
    assert s.active_deadline_s == 1200
    assert s.secret_env == (SecretEnvVar("GH_TOKEN", "github", "token"),)
    assert s.oauth_credentials_secret == ("claude-creds", "credentials.json")
    assert s.read_only_volumes == (
        ReadOnlyVolume(PvcSource("repos"), "/data/repos"),
        ReadOnlyVolume(ConfigMapSource("rules"), "/etc/rules", "rules.md"),
        ReadOnlyVolume(HostPathSource("/srv/ref"), "/ref"),
    )
    assert dict(s.managed_settings_presets) == {"strict": "ms-strict"}
    assert s.default_managed_settings == "strict"
    assert s.claude_profiles == (ClaudeProfile("claude-profile", ""), ClaudeProfile("claude-profile-rules", "rules"))
    assert s.egress_profile == "anthropic-only"
    assert s.previous_attempt_timeout_s == 30
    assert s.runtime_class == "gvisor"
    assert s.orphan_reaper_interval_s == 120


def test_a_full_file_renders_valid_manifests(tmp_path: Path) -> None:
    p = K8sEphemeralProvider.from_file(write(tmp_path, FULL))
    objs = p.manifests(AgentConfig("x" * 100_001).input("https://x/a", "/in/a"), now=0)
    validate_manifests(objs)
    assert [o["kind"] for o in objs] == ["ConfigMap", "Pod"]


def test_env_may_be_a_mapping() -> None:
    p = K8sEphemeralProvider.from_dict({"image": "img", "env": {"A": "1", "B": "2"}})
    assert p.settings.env_vars == (("A", "1"), ("B", "2"))


def test_oauth_token_secret_is_the_token_env_from_a_secret() -> None:
    p = K8sEphemeralProvider.from_dict({"image": "img", "oauth_token_secret": {"secret": "s", "key": "k"}})
    assert p.settings.secret_env == (SecretEnvVar("CLAUDE_CODE_OAUTH_TOKEN", "s", "k"),)


def test_auth_proxy_url_is_checked_and_trimmed() -> None:
    assert K8sEphemeralProvider.from_dict({"image": "i", "auth_proxy": "http://p:8080/"}).settings.auth_proxy_url == (
        "http://p:8080"
    )
    with pytest.raises(errors.ConfigError, match="auth_proxy url must start with"):
        K8sEphemeralProvider.from_dict({"image": "i", "auth_proxy": "p:8080"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"image": "i", "namespce": "x"}, "unknown key 'namespce'; did you mean 'namespace'?"),
        ({"image": "i", "sandbox": {"uid": 1}}, "sandbox: unknown key 'uid'; known: "),
        (
            {"image": "i", "volumes": [{"host_path": "/a", "mount": "/b"}]},
            "volumes[0]: unknown key 'mount'; did you mean 'mount_path'?",
        ),
        ({"namespace": "x"}, "image: is required"),
        ({"image": "i", "timeout_seconds": "5m"}, "timeout_seconds: must be a number, got str"),
        ({"image": "i", "pod_labels": {"tier": 1}}, "pod_labels: must be a mapping of strings to strings"),
        ({"image": "i", "sandboxed": False, "sandbox": {}}, "sandbox: needs 'sandboxed: true'"),
        ({"image": "i", "volumes": [{"host_path": "/a"}]}, "volumes[0].mount_path: is required"),
        ({"image": "i", "read_only_volumes": [{"mount_path": "/a"}]}, "needs exactly one of pvc, host_path"),
        ({"image": "i", "oauth_credentials": "{}"}, "oauth_credentials: refused: inline credentials"),
        ({"image": "i", "auth_proxy_admin_key": "k"}, "auth_proxy_admin_key: refused: the admin key"),
        ({"image": "i", "runtime_class": " "}, "runtime class must not be empty"),
        ({"image": "i", "pod_labels": {"app.kubernetes.io/component": "x"}}, "is reserved"),
        ({"image": "i", "claude_profiles": [{"configmap": "c", "subdir": "../x"}]}, "invalid claude profile subdir"),
        ({"image": "i", "orphan_reaper_interval_seconds": 0}, "orphan reaper interval must be greater than zero"),
    ],
)
def test_bad_settings_are_refused_by_name(data: dict[str, Any], message: str) -> None:
    with pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider.from_dict(data)
    assert message in info.value.message


def test_sandbox_section_alone_implies_sandboxed() -> None:
    """``sandbox:`` alone implies sandboxed; an explicit ``sandboxed: false`` with it is a contradiction."""
    p = K8sEphemeralProvider.from_dict({"image": "i", "sandbox": {"writable_root": True}})
    assert p.settings.sandbox is not None
    assert p.settings.sandbox.writable_root is True


def test_unreadable_and_invalid_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot read provider file"):
        K8sEphemeralProvider.from_file(tmp_path / "missing.yaml")
    with pytest.raises(errors.ConfigError, match="is not valid YAML"):
        K8sEphemeralProvider.from_file(write(tmp_path, "image: [unclosed"))
    with pytest.raises(errors.ConfigError, match="must hold a mapping of settings"):
        K8sEphemeralProvider.from_file(write(tmp_path, "- image"))
