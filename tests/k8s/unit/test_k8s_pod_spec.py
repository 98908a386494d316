"""The agent Pod as data: labels, env order, volumes in order, inputs, hardening checks.

Counterparts of the reference's ``k8s/common.rs`` unit tests, plus a property test that
mount-path validation never accepts a path reaching a reserved sandbox path. Every pod
rendered here is validated strictly for Kubernetes 1.30 and 1.37.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ironflow import AgentConfig, PodSettings, PvcVolume, errors, labels
from ironflow.claude import command, layout
from ironflow.k8s import K8sEphemeralProvider, K8sResources, step_manifests
from ironflow.secrets import Secret
from ironflow.step_sandbox import ConfigMapSource, ReadOnlyVolume, SecretEnvVar
from ironflow.testing.k8s_validate import validate_manifest, validate_manifests

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"
NOW = 1_700_000_000


def pod_of(p: K8sEphemeralProvider, cfg: AgentConfig | None = None, **kw: Any) -> dict[str, Any]:
    objs = p.manifests(cfg or AgentConfig("hello"), now=NOW, pod_name="claude-code-test-00000001", **kw)
    validate_manifests(objs)
    return objs[-1]


def spec_of(p: K8sEphemeralProvider, cfg: AgentConfig | None = None, **kw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = pod_of(p, cfg, **kw)["spec"]
    return spec


def main_of(p: K8sEphemeralProvider, cfg: AgentConfig | None = None, **kw: Any) -> dict[str, Any]:
    container: dict[str, Any] = spec_of(p, cfg, **kw)["containers"][0]
    return container


def refused(p: K8sEphemeralProvider, cfg: AgentConfig) -> str:
    with pytest.raises(errors.StepConfigError) as info:
        p.manifests(cfg, now=NOW)
    return info.value.message


def with_step_pvc(cfg: AgentConfig, volume: PvcVolume) -> AgentConfig:
    """Bypass the builder's own checks, as a deserialised step could."""
    return cfg.replace(pod=PodSettings(pvc_volumes=(volume,)))


SANDBOXED = K8sEphemeralProvider.sandboxed(IMAGE)
PLAIN = K8sEphemeralProvider(IMAGE)


def test_generate_pod_name_has_prefix() -> None:
    name = step_manifests.generate_pod_name(1_700_000_000_123, 0xDEADBEEF)
    assert name == f"claude-code-{1_700_000_000_123:x}-deadbeef"


def test_generate_pod_name_unique_same_millisecond() -> None:
    assert step_manifests.generate_pod_name(5, 1) != step_manifests.generate_pod_name(5, 2)
    rendered = {pod_of(PLAIN.namespace("a"), None)["metadata"]["name"]}
    pods = [PLAIN.manifests(AgentConfig("x"), now=NOW)[-1] for _ in range(20)]
    validate_manifests(pods)
    names = {pod["metadata"]["name"] for pod in pods}
    assert len(names) == 20
    assert all(n.startswith(f"claude-code-{NOW * 1000:x}-") for n in names)
    assert rendered == {"claude-code-test-00000001"}


def test_build_credentials_prefix_none() -> None:
    assert command.credentials_prefix() == ""


def test_build_credentials_prefix_writes_file() -> None:
    prefix = command.credentials_prefix(inline=Secret('{"k":"it\'s"}'))
    assert prefix == (
        "mkdir -p $HOME/.claude && printf '%s' '{\"k\":\"it'\\''s\"}' > $HOME/.claude/.credentials.json && "
    )


def test_build_credentials_from_env_prefix_uses_var_only() -> None:
    prefix = command.credentials_prefix(from_secret=True, inline=Secret("inline-value"))
    assert "inline-value" not in prefix
    assert prefix == (
        'mkdir -p "$HOME/.claude" && '
        'printf \'%s\' "$IRONFLOW_CLAUDE_CREDENTIALS" > "$HOME/.claude/.credentials.json" && '
    )


def test_k8s_resources_default() -> None:
    """Every agent pod gets the default requests and limits, ephemeral storage included."""
    assert main_of(PLAIN)["resources"] == K8sResources().render()
    assert set(main_of(PLAIN)["resources"]["limits"]) == {"cpu", "memory", "ephemeral-storage"}
    assert K8sResources.none().render() is None
    only = dataclasses.replace(K8sResources.none(), memory_limit="1Gi")
    assert only.render() == {"limits": {"memory": "1Gi"}}


def test_k8s_resources_refuse_a_request_above_its_limit() -> None:
    with pytest.raises(errors.ConfigError, match=r"resources\.cpu_request 500m is above resources\.cpu_limit 250m"):
        K8sResources(cpu_limit="250m")
    assert K8sResources(cpu_request="100m", cpu_limit="250m").cpu_limit == "250m"
    assert K8sResources(memory_request="1024Mi", memory_limit="1Gi").memory_limit == "1Gi"


def test_every_agent_pod_drops_service_links() -> None:
    for provider in (PLAIN, K8sEphemeralProvider.sandboxed(IMAGE)):
        assert pod_of(provider, None)["spec"]["enableServiceLinks"] is False


def test_build_pod_spec_without_image_pull_secrets() -> None:
    assert "imagePullSecrets" not in spec_of(PLAIN)


def test_build_pod_spec_with_image_pull_secrets() -> None:
    assert spec_of(PLAIN.image_pull_secret("regcred"))["imagePullSecrets"] == [{"name": "regcred"}]


def test_build_pod_spec_without_extra_labels() -> None:
    assert pod_of(PLAIN)["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "ironflow",
        "app.kubernetes.io/component": "claude-runner",
    }


def test_build_pod_spec_with_extra_labels() -> None:
    got = pod_of(PLAIN.pod_label("team", "infra"))["metadata"]["labels"]
    assert got["team"] == "infra"
    assert got[labels.LABEL_COMPONENT] == "claude-runner"


def test_build_pod_spec_extra_labels_cannot_override_hardcoded() -> None:
    """Even merged inputs carrying the reserved keys (bypassing the builders) lose to ironflow's values."""
    inputs = step_manifests.merged_pod_inputs(PLAIN.settings, AgentConfig("hi"))
    forged = step_manifests.PodInputs(
        **{**inputs.__dict__, "labels": {labels.LABEL_MANAGED_BY: "someone", labels.LABEL_COMPONENT: "other"}}
    )
    pod = step_manifests.build_pod(
        PLAIN.settings,
        forged,
        AgentConfig("hi"),
        name="p",
        shell_command="true",
        plain_env=[],
        worker_env={},
        expires_at=None,
    )
    validate_manifest(pod)
    assert pod["metadata"]["labels"] == {
        labels.LABEL_MANAGED_BY: "ironflow",
        labels.LABEL_COMPONENT: "claude-runner",
    }


def test_build_pod_spec_merges_labels_correctly() -> None:
    p = PLAIN.pod_labels({"team": "infra", "tier": "a"}).egress_profile("none")
    got = pod_of(p, AgentConfig("hi").pod_label("tier", "b").scoped("r1", "s1"))["metadata"]["labels"]
    assert got == {
        "team": "infra",
        "tier": "b",
        labels.LABEL_EGRESS_PROFILE: "none",
        labels.LABEL_RUN_ID: "r1",
        labels.LABEL_STEP: "s1",
        labels.LABEL_MANAGED_BY: "ironflow",
        labels.LABEL_COMPONENT: "claude-runner",
    }


def test_build_pod_spec_with_node_selector() -> None:
    assert spec_of(PLAIN.node_selector("pool", "agents"))["nodeSelector"] == {"pool": "agents"}


def test_build_pod_spec_without_node_selector_omits_key() -> None:
    assert "nodeSelector" not in spec_of(PLAIN)


def test_build_pod_spec_without_volumes() -> None:
    spec = spec_of(PLAIN)
    assert "volumes" not in spec
    assert "volumeMounts" not in spec["containers"][0]


def test_build_pod_spec_with_volumes() -> None:
    spec = spec_of(PLAIN.volume("/srv/a", "/a").volume("/srv/b", "/b"))
    assert spec["volumes"] == [
        {"name": "vol-0", "hostPath": {"path": "/srv/a", "type": "Directory"}},
        {"name": "vol-1", "hostPath": {"path": "/srv/b", "type": "Directory"}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "vol-0", "mountPath": "/a"},
        {"name": "vol-1", "mountPath": "/b"},
    ]


def test_build_pod_spec_with_pvc_volumes() -> None:
    spec = spec_of(PLAIN.pvc_volume("cache", "/cache"))
    assert spec["volumes"] == [{"name": "pvc-0", "persistentVolumeClaim": {"claimName": "cache"}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "pvc-0", "mountPath": "/cache"}]


def test_build_pod_spec_with_hostpath_and_pvc_volumes() -> None:
    spec = spec_of(PLAIN.pvc_volume("cache", "/cache").volume("/srv", "/srv"))
    assert [v["name"] for v in spec["volumes"]] == ["vol-0", "pvc-0"]


def test_parent_dir_extracts_directory() -> None:
    assert step_manifests.parent_dir("/data/in/file.txt") == "/data/in"
    assert step_manifests.parent_dir("/file") == ""
    assert step_manifests.parent_dir("file") == ""


def test_shell_quote_escapes_single_quotes() -> None:
    assert command.shell_quote("it's") == "'it'\\''s'"
    assert command.shell_quote("") == "''"


def test_validate_inputs_rejects_relative_paths() -> None:
    msg = refused(PLAIN, AgentConfig("hi").input("https://x/a", "data/a.txt"))
    assert msg == "agent input mount_path must be absolute, got 'data/a.txt'"


def test_validate_inputs_rejects_root_mount() -> None:
    msg = refused(PLAIN, AgentConfig("hi").input("https://x/a", "/a.txt"))
    assert msg == "agent input mount_path must live under a directory (not '/'), got '/a.txt'"


def test_validate_inputs_rejects_parent_segments() -> None:
    msg = refused(PLAIN, AgentConfig("hi").input("https://x/a", "/data/../etc/a.txt"))
    assert "must be a normalized file path" in msg


def test_build_pod_spec_with_single_input_creates_init_container() -> None:
    spec = spec_of(PLAIN, AgentConfig("hi").input("https://example.com/a b", "/in/a.txt"))
    init = spec["initContainers"]
    assert init == [
        {
            "name": "ironflow-input-fetch",
            "image": "curlimages/curl:8.10.1",
            "imagePullPolicy": "IfNotPresent",
            "command": [
                "sh",
                "-c",
                "set -e\ncurl -sSfL --retry 3 --max-time 300 'https://example.com/a b' -o '/in/a.txt'\n",
            ],
            "volumeMounts": [{"name": "ironflow-input-0", "mountPath": "/in"}],
        }
    ]
    assert spec["volumes"] == [{"name": "ironflow-input-0", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "ironflow-input-0", "mountPath": "/in"}]


def test_build_pod_spec_groups_inputs_by_parent_dir() -> None:
    cfg = AgentConfig("hi").input("u1", "/z/a").input("u2", "/b/c").input("u3", "/z/d")
    spec = spec_of(PLAIN, cfg)
    assert spec["volumes"] == [
        {"name": "ironflow-input-0", "emptyDir": {}},
        {"name": "ironflow-input-1", "emptyDir": {}},
    ]
    assert spec["initContainers"][0]["volumeMounts"] == [
        {"name": "ironflow-input-0", "mountPath": "/b"},
        {"name": "ironflow-input-1", "mountPath": "/z"},
    ]


def test_build_pod_spec_no_inputs_no_init_container() -> None:
    assert "initContainers" not in spec_of(SANDBOXED)


def test_build_pod_spec_with_prompt_configmap_mounts_volume() -> None:
    objs = PLAIN.manifests(AgentConfig("p" * 100_001), now=NOW, pod_name="claude-code-big-00000001")
    validate_manifests(objs)
    cm, pod = objs
    assert cm["metadata"]["name"] == "claude-code-big-00000001-prompt"
    assert pod["spec"]["volumes"] == [
        {"name": "ironflow-prompt", "configMap": {"name": "claude-code-big-00000001-prompt"}}
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "ironflow-prompt", "mountPath": "/mnt/ironflow-prompt", "readOnly": True}
    ]


def test_build_pod_spec_without_prompt_configmap_no_extra_volume() -> None:
    objs = PLAIN.manifests(AgentConfig("p" * 100_000), now=NOW)
    validate_manifests(objs)
    assert [o["kind"] for o in objs] == ["Pod"]
    assert "volumes" not in objs[0]["spec"]


def test_build_pod_spec_sandbox_security_context() -> None:
    spec = spec_of(SANDBOXED)
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_build_pod_spec_sandbox_custom_uid() -> None:
    ctx = spec_of(SANDBOXED.run_as_user(4242))["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsGroup"], ctx["fsGroup"]) == (4242, 4242, 4242)


def test_build_pod_spec_sandbox_writable_root() -> None:
    assert main_of(SANDBOXED.allow_writable_root())["securityContext"]["readOnlyRootFilesystem"] is False


def test_build_pod_spec_sandbox_init_container_is_hardened() -> None:
    spec = spec_of(SANDBOXED, AgentConfig("hi").input("u", "/in/a"))
    assert spec["initContainers"][0]["securityContext"] == spec["containers"][0]["securityContext"]
    assert spec["initContainers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_build_pod_spec_sandbox_home_tmp_emptydir_size_limits() -> None:
    spec = spec_of(SANDBOXED.home_size_limit("3Gi").tmp_size_limit("256Mi"))
    assert spec["volumes"] == [
        {"name": "ironflow-home", "emptyDir": {"sizeLimit": "3Gi"}},
        {"name": "ironflow-tmp", "emptyDir": {"sizeLimit": "256Mi"}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "ironflow-home", "mountPath": "/home/claude"},
        {"name": "ironflow-tmp", "mountPath": "/tmp"},
    ]
    assert spec["containers"][0]["env"][-2:] == [
        {"name": "HOME", "value": "/home/claude"},
        {"name": "TMPDIR", "value": "/tmp"},
    ]


def test_build_pod_spec_sandbox_keeps_user_home() -> None:
    env = main_of(SANDBOXED.env("HOME", "/srv/home"))["env"]
    assert [e for e in env if e["name"] == "HOME"] == [{"name": "HOME", "value": "/srv/home"}]
    assert env[-1] == {"name": "TMPDIR", "value": "/tmp"}


def test_build_pod_spec_sandbox_no_sa_disables_automount() -> None:
    spec = spec_of(SANDBOXED)
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec


def test_build_pod_spec_sandbox_with_sa_omits_automount() -> None:
    spec = spec_of(SANDBOXED, AgentConfig("hi").service_account("reader"))
    assert spec["serviceAccountName"] == "reader"
    assert "automountServiceAccountToken" not in spec


def test_build_pod_spec_without_sandbox_has_no_security_context() -> None:
    spec = spec_of(PLAIN, AgentConfig("hi").input("u", "/in/a"))
    assert "securityContext" not in spec
    assert "automountServiceAccountToken" not in spec
    assert "securityContext" not in spec["containers"][0]
    assert "securityContext" not in spec["initContainers"][0]
    assert [e["name"] for e in spec["containers"][0]["env"]] == ["IRONFLOW_ALLOW_BYPASS"]


def test_build_pod_spec_secret_env_uses_secret_key_ref() -> None:
    env = main_of(PLAIN.env_from_secret("GH_TOKEN", "github", "token"))["env"]
    assert env[-1] == {"name": "GH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "github", "key": "token"}}}


def test_build_pod_spec_explicit_env_drops_blanking_entry() -> None:
    worker = {"CLAUDE_CODE_USE_BEDROCK": "1", "CLAUDE_MODEL": "x", "PATH": "/bin", "IRONFLOW_ALLOW_BYPASS": "1"}
    env = main_of(PLAIN.env("CLAUDE_MODEL", "opus"), worker_env=worker)["env"]
    assert env == [
        {"name": "CLAUDE_CODE_USE_BEDROCK", "value": ""},
        {"name": "IRONFLOW_ALLOW_BYPASS", "value": ""},
        {"name": "CLAUDE_MODEL", "value": "opus"},
    ]


def test_build_env_orders_blanks_plain_then_secret() -> None:
    env = step_manifests.build_env(
        worker_env={"CLAUDE_B": "x", "CLAUDE_A": "y"},
        plain=[("P", "1")],
        secret=[SecretEnvVar("CLAUDE_B", "s", "k")],
    )
    assert [e["name"] for e in env] == ["CLAUDE_A", "IRONFLOW_ALLOW_BYPASS", "P", "CLAUDE_B"]


def test_build_pod_spec_read_only_volumes() -> None:
    cfg = AgentConfig("hi").read_only_config_map("rules", "/etc/rules").read_only_host_path("/srv/ref", "/ref")
    spec = spec_of(PLAIN.read_only_pvc("repos", "/repos"), cfg)
    assert spec["volumes"] == [
        {"name": "ro-0", "persistentVolumeClaim": {"claimName": "repos", "readOnly": True}},
        {"name": "ro-1", "configMap": {"name": "rules"}},
        {"name": "ro-2", "hostPath": {"path": "/srv/ref", "type": "Directory"}},
    ]
    assert all(m["readOnly"] is True for m in spec["containers"][0]["volumeMounts"])


def test_sessions_mount_path_is_under_sandbox_home() -> None:
    assert layout.CONVERSATIONS_MOUNT_PATH.startswith(layout.SANDBOX_HOME + "/")


def test_build_pod_spec_sessions_volume_mounted_after_home() -> None:
    mounts = main_of(SANDBOXED.conversations_volume("sessions"))["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/home/claude", "/home/claude/.claude/projects", "/tmp"]


def test_build_pod_spec_without_sessions_volume_has_none() -> None:
    assert all(v["name"] != "ironflow-sessions" for v in spec_of(SANDBOXED)["volumes"])


def test_validate_hardening_rejects_step_pvc_at_sessions_mount() -> None:
    """The sessions mount sits under HOME: a step PVC there is refused as a reserved path."""
    cfg = AgentConfig("hi").pvc_volume("x", "/home/claude/.claude/projects/")
    msg = refused(SANDBOXED.conversations_volume("sessions"), cfg)
    assert msg == "step pvc volume cannot be mounted at reserved path '/home/claude/.claude/projects/'"


def test_validate_hardening_rejects_projects_profile_with_sessions_volume() -> None:
    p = SANDBOXED.conversations_volume("sessions").claude_profile_configmap_at("cm", "projects/x")
    assert refused(p, AgentConfig("hi")) == (
        "claude profile subdir 'projects/x' overlaps the sessions volume at '/home/claude/.claude/projects'"
    )


def test_validate_hardening_accepts_other_profiles_with_sessions_volume() -> None:
    p = SANDBOXED.conversations_volume("sessions").claude_profile_configmap_at("cm", "projects-old")
    assert spec_of(p)["volumes"][0] == {"name": "ironflow-claude-profile-0", "configMap": {"name": "cm"}}


def test_build_pod_spec_managed_settings_mount() -> None:
    p = PLAIN.managed_settings_preset("strict", "ms")
    mounts = main_of(p, AgentConfig("hi").managed_settings("strict"))["volumeMounts"]
    assert mounts == [{"name": "ironflow-managed-settings", "mountPath": "/etc/claude-code", "readOnly": True}]


def test_k8s_profile_mounts_one_read_only_sibling_per_configmap() -> None:
    p = PLAIN.claude_profile_configmap("base").claude_profile_configmap_at("rules", "rules")
    spec = spec_of(p)
    assert spec["volumes"] == [
        {"name": "ironflow-claude-profile-0", "configMap": {"name": "base"}},
        {"name": "ironflow-claude-profile-1", "configMap": {"name": "rules"}},
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "ironflow-claude-profile-0", "mountPath": "/etc/ironflow/claude-profile/0", "readOnly": True},
        {"name": "ironflow-claude-profile-1", "mountPath": "/etc/ironflow/claude-profile/1", "readOnly": True},
    ]


def test_build_pod_spec_annotations() -> None:
    assert pod_of(PLAIN.timeout(30))["metadata"]["annotations"] == {"ironflow.io/expires-at": str(NOW + 90)}


def test_validate_hardening_rejects_relative_path() -> None:
    msg = refused(PLAIN, AgentConfig("hi").read_only_pvc("x", "data"))
    assert msg == "read-only volume mount_path must be absolute, got 'data'"


@pytest.mark.parametrize(
    "path", ["/", "/home/claude", "/home/claude/", "/tmp", "/etc/claude-code", "/etc/ironflow/claude-profile/3"]
)
def test_validate_hardening_rejects_reserved_paths(path: str) -> None:
    msg = refused(SANDBOXED, AgentConfig("hi").read_only_pvc("x", path))
    assert msg == f"read-only volume cannot be mounted at reserved path '{path}'"


def test_validate_hardening_rejects_duplicate_mounts() -> None:
    cfg = AgentConfig("hi").read_only_pvc("a", "/data").read_only_config_map("b", "/data/")
    assert refused(PLAIN, cfg) == "duplicate volume mount path '/data/'"


def test_validate_hardening_rejects_mount_clashing_with_pvc_volume() -> None:
    p = PLAIN.pvc_volume("cache", "/cache/")
    assert refused(p, AgentConfig("hi").read_only_pvc("x", "/cache")) == "duplicate volume mount path '/cache'"
    assert spec_of(p, AgentConfig("hi").read_only_pvc("x", "/cache").without_provider_volumes())["volumes"] == [
        {"name": "ro-0", "persistentVolumeClaim": {"claimName": "x", "readOnly": True}}
    ]


def test_build_pod_spec_step_pvc_with_sub_path_read_write() -> None:
    main = main_of(PLAIN, AgentConfig("hi").pvc_volume("work", "/work", sub_path="runs/42"))
    assert main["volumeMounts"] == [{"name": "step-pvc-0", "mountPath": "/work", "subPath": "runs/42"}]


def test_build_pod_spec_step_pvc_read_only_mount() -> None:
    main = main_of(PLAIN, AgentConfig("hi").pvc_volume("work", "/work", read_only=True))
    assert main["volumeMounts"] == [{"name": "step-pvc-0", "mountPath": "/work", "readOnly": True}]


def test_build_pod_spec_step_pvc_same_claim_shares_one_volume() -> None:
    cfg = AgentConfig("hi").pvc_volume("work", "/a", sub_path="a").pvc_volume("work", "/b", sub_path="b")
    spec = spec_of(PLAIN, cfg)
    assert spec["volumes"] == [{"name": "step-pvc-0", "persistentVolumeClaim": {"claimName": "work"}}]
    assert [m["name"] for m in spec["containers"][0]["volumeMounts"]] == ["step-pvc-0", "step-pvc-0"]


def test_build_pod_spec_step_pvc_reuses_provider_claim_volume() -> None:
    spec = spec_of(PLAIN.pvc_volume("cache", "/cache"), AgentConfig("hi").pvc_volume("cache", "/c2", sub_path="x"))
    assert [v["name"] for v in spec["volumes"]] == ["pvc-0"]
    assert spec["containers"][0]["volumeMounts"][1] == {"name": "pvc-0", "mountPath": "/c2", "subPath": "x"}


def test_validate_hardening_step_pvc_rejects_relative_path() -> None:
    msg = refused(PLAIN, AgentConfig("hi").pvc_volume("w", "work"))
    assert msg == "step pvc volume mount_path must be absolute, got 'work'"


def test_validate_hardening_step_pvc_rejects_reserved_path() -> None:
    msg = refused(SANDBOXED, AgentConfig("hi").pvc_volume("w", "/tmp"))
    assert msg == "step pvc volume cannot be mounted at reserved path '/tmp'"


def test_validate_hardening_step_pvc_rejects_duplicate_with_provider_pvc() -> None:
    msg = refused(PLAIN.pvc_volume("cache", "/cache"), AgentConfig("hi").pvc_volume("other", "/cache"))
    assert msg == "duplicate volume mount path '/cache'"


def test_validate_hardening_step_pvc_rejects_bad_sub_path_and_empty_claim() -> None:
    bad_sub = with_step_pvc(AgentConfig("hi"), PvcVolume("w", "/w", sub_path="../x"))
    assert refused(PLAIN, bad_sub) == (
        "step pvc volume: sub_path '../x' must be relative, without empty, '.' or '..' segments"
    )
    empty = with_step_pvc(AgentConfig("hi"), PvcVolume("", "/w"))
    assert refused(PLAIN, empty) == "step pvc volume: pvc volume needs a non-empty claim_name"


def test_an_empty_secret_field_is_refused_when_the_step_is_built() -> None:
    with pytest.raises(errors.ConfigError, match=r"secret_env GH: secret must be a Kubernetes object name .* got ''"):
        AgentConfig("hi").env_from_secret("GH", "", "token")


_SEGMENTS = st.sampled_from(
    ["", ".", "..", "home", "claude", "tmp", "etc", "claude-code", "ironflow", "claude-profile", "mnt", "0", "x"]
)


def _reserved(resolved: str) -> bool:
    return any(resolved == r or resolved.startswith(r + "/") for r in layout.RESERVED_MOUNT_PATHS)


@given(st.lists(_SEGMENTS, min_size=1, max_size=6), st.booleans(), st.booleans())
def test_mount_path_validation_never_accepts_an_escape(segments: list[str], absolute: bool, slash: bool) -> None:
    """An accepted step mount is absolute, already normal, and at or under no reserved sandbox path."""
    path = ("/" if absolute else "") + "/".join(segments) + ("/" if slash else "")
    cfg = with_read_only(AgentConfig("hi"), ReadOnlyVolume(ConfigMapSource("cm"), path))
    try:
        SANDBOXED.manifests(cfg, now=NOW)
    except errors.StepConfigError:
        return
    resolved = posixpath.normpath(path)
    assert path.startswith("/")
    assert resolved == path.rstrip("/")
    assert resolved != "/"
    assert not _reserved(resolved)


def with_read_only(cfg: AgentConfig, volume: ReadOnlyVolume) -> AgentConfig:
    return cfg.replace(pod=PodSettings(read_only_volumes=(volume,)))


@pytest.mark.parametrize(
    ("mount_path", "sub_path"),
    [
        ("/etc/claude-code/managed-settings.json", "managed-settings.json"),
        ("/home/claude/.claude", None),
        ("/home/claude/.claude/settings.json", "settings.json"),
        ("/usr/local/bin", None),
    ],
)
def test_a_step_read_only_config_map_over_a_sandbox_path_is_refused(mount_path: str, sub_path: str | None) -> None:
    """Managed settings, HOME and the PATH stay the sandbox's: a ConfigMap cannot cover them, even one file."""
    cfg = with_read_only(AgentConfig("hi"), ReadOnlyVolume(ConfigMapSource("mine"), mount_path, sub_path))
    for provider in (SANDBOXED, PLAIN):
        assert refused(provider, cfg) == f"read-only volume cannot be mounted at reserved path '{mount_path}'"


def test_a_step_pvc_under_a_path_dir_is_refused() -> None:
    cfg = with_step_pvc(AgentConfig("hi"), PvcVolume("tools", "/usr/bin/extra"))
    assert refused(SANDBOXED, cfg) == "step pvc volume cannot be mounted at reserved path '/usr/bin/extra'"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MY_VAR", "Bearer sk-ant-oat01-abcdef"),
        ("anthropic_api_key", "plain-value-1"),
        ("Claude_Code_OAuth_Token", "plain-value-2"),
    ],
)
def test_a_credential_in_the_provider_env_is_refused_behind_the_proxy(name: str, value: str) -> None:
    """Any case of a credential variable, or sk-ant anywhere in a value: named, the value never shown."""
    p = K8sEphemeralProvider(IMAGE).env(name, value).auth_proxy("http://proxy:8080")
    message = refused(p, AgentConfig("hi"))
    assert message == step_manifests.proxy_forbidden_message(name)
    assert value not in message


def test_a_lowercase_credential_secret_env_is_refused_behind_the_proxy() -> None:
    p = K8sEphemeralProvider(IMAGE).env_from_secret("anthropic_api_key", "s", "k").auth_proxy("http://proxy:8080")
    assert refused(p, AgentConfig("hi")) == step_manifests.proxy_forbidden_message("anthropic_api_key")


def test_input_directory_on_a_sandbox_mount_is_refused_before_the_api_would() -> None:
    """An input under /tmp would mount a second volume at /tmp: refused with the path named."""
    assert refused(SANDBOXED, AgentConfig("hi").input("u", "/tmp/a.txt")) == (
        "agent input cannot be mounted at reserved path '/tmp/a.txt'"
    )
    assert refused(PLAIN.pvc_volume("c", "/cache"), AgentConfig("hi").input("u", "/cache/a")) == (
        "duplicate volume mount path '/cache'"
    )
