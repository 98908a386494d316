"""AgentSandboxProvider's pure half: template objects, the step's claim, the exec plan, step checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, schemas
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.models import ApiVersion
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig, PermissionMode
from ironflow.testing import find_leaks

RUN = "01a0e906-1f85-7000-8000-00000000a5b1"
POD = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:1").namespace("agents").timeout(300)
PROXIED = POD.auth_proxy("http://auth-proxy.ironflow:8080")


def test_only_a_hardened_pod_provider_is_accepted() -> None:
    with pytest.raises(errors.ConfigError, match="needs the hardened pod"):
        AgentSandboxProvider(K8sEphemeralProvider("img"))


def test_builders_refuse_values_that_cannot_work() -> None:
    p = AgentSandboxProvider(POD)
    with pytest.raises(errors.ConfigError, match="replicas must be an integer >= 0"):
        p.warm_pool(replicas=-1)
    with pytest.raises(errors.ConfigError, match="ready_timeout must be"):
        p.ready_timeout(0)
    with pytest.raises(errors.ConfigError, match="v1alpha1 or v1beta1"):
        p.api_version("v2")
    with pytest.raises(errors.ConfigError, match="not a valid DNS subdomain"):
        p.template("Bad_Name")


@pytest.mark.parametrize("version", list(ApiVersion))
def test_template_objects_are_the_idle_hardened_pod_and_its_pool(version: ApiVersion) -> None:
    p = AgentSandboxProvider(POD).template("agents-tpl").warm_pool("hot", replicas=3).api_version(version)
    template, pool = sandbox_steps.template_objects(p.settings)
    assert template["metadata"] == {
        "name": "agents-tpl",
        "namespace": "agents",
        "labels": {labels.LABEL_MANAGED_BY: "ironflow"},
    }
    spec = template["spec"]["podTemplate"]["spec"]
    assert spec["securityContext"]["runAsUser"] == 10001
    assert "activeDeadlineSeconds" not in spec
    assert pool["metadata"]["name"] == "hot"
    assert pool["spec"]["replicas"] == 3
    assert pool["spec"]["sandboxTemplateRef"] == {"name": "agents-tpl"}
    for obj in (template, pool):
        assert schemas.schema_problems(obj) == []


def test_claim_carries_run_labels_expiry_and_shutdown_time_and_no_env() -> None:
    p = AgentSandboxProvider(PROXIED).ready_timeout(60)
    claim = sandbox_steps.claim_manifest(
        p.settings, AgentConfig("hi").scoped(RUN, "review"), name="c1", now=1_800_000_000
    )
    meta = claim["metadata"]
    assert meta["labels"] == {
        labels.LABEL_RUN_ID: RUN,
        labels.LABEL_STEP: "review",
        labels.LABEL_MANAGED_BY: "ironflow",
        labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_CLAIM,
    }
    expires = 1_800_000_000 + 300 + 60 + 60  # timeout + deadline margin + ready timeout
    assert meta["annotations"] == {labels.ANNOTATION_EXPIRES_AT: str(expires)}
    assert claim["spec"]["lifecycle"] == {"shutdownTime": "2027-01-15T08:07:00Z", "shutdownPolicy": "Delete"}
    assert claim["spec"]["warmPoolRef"] == {"name": "ironflow-agent"}
    assert "env" not in claim["spec"]
    assert claims.claim_reap_reason(claim, expires) is None
    assert claims.claim_reap_reason(claim, expires + 1) == "Expired"


def test_v1alpha1_claim_names_the_template_and_pool_policy() -> None:
    p = AgentSandboxProvider(POD).api_version("v1alpha1").warm_pool("hot")
    claim = sandbox_steps.claim_manifest(p.settings, AgentConfig("hi"), name="c1", now=0)
    assert claim["apiVersion"] == "extensions.agents.x-k8s.io/v1alpha1"
    assert claim["spec"]["sandboxTemplateRef"] == {"name": "ironflow-agent"}
    assert claim["spec"]["warmpool"] == "hot"


def test_exec_plan_delivers_the_token_over_stdin_never_in_argv() -> None:
    p = AgentSandboxProvider(PROXIED)
    token = "ifap_super_secret_token_value"
    plan = sandbox_steps.exec_plan(p.settings, AgentConfig("hi"), proxy_token=Secret(token))
    ((argv, stdin),) = plan.deliveries
    assert stdin == token.encode()
    assert f"head -c {len(token)}" in argv[2]
    assert find_leaks([token], list(argv), list(plan.agent), repr(plan)) == []
    shell = plan.agent[2]
    assert shell.startswith("exec </dev/null; ")
    assert "ANTHROPIC_BASE_URL='http://auth-proxy.ironflow:8080'" in shell
    assert 'rm -f "$HOME/.ironflow/proxy-token"' in shell
    assert "'claude' '-p' 'hi'" in shell


def test_exec_plan_sends_a_large_prompt_as_a_file() -> None:
    prompt = "x" * 100_001
    plan = sandbox_steps.exec_plan(AgentSandboxProvider(POD).settings, AgentConfig(prompt))
    ((_argv, stdin),) = plan.deliveries
    assert stdin == prompt.encode()
    assert plan.agent[2].startswith('exec <"$HOME/.ironflow/prompt"; ')
    assert "-p" not in plan.agent[2]


def test_exec_plan_refuses_a_token_without_a_proxy() -> None:
    with pytest.raises(errors.ConfigError, match="needs a pod provider with auth_proxy"):
        sandbox_steps.exec_plan(AgentSandboxProvider(POD).settings, AgentConfig("hi"), proxy_token=Secret("ifap_x"))


def test_run_labels_do_not_count_as_a_pod_change() -> None:
    sandbox_steps.check_step(AgentSandboxProvider(POD).settings, AgentConfig("hi").scoped(RUN, "a"))


@pytest.mark.parametrize(
    "config",
    [
        AgentConfig("hi").pod_label("team", "a"),
        AgentConfig("hi").egress_profile("open"),
        AgentConfig("hi").input("https://example.com/a", "/inputs/a"),
    ],
)
def test_a_step_that_changes_the_pod_is_refused(config: AgentConfig) -> None:
    with pytest.raises(errors.StepConfigError, match="changes the sandbox pod"):
        sandbox_steps.check_step(AgentSandboxProvider(POD).settings, config)


def test_pod_provider_refusals_still_apply() -> None:
    with pytest.raises(errors.StepConfigError, match="reserved"):
        sandbox_steps.check_step(
            AgentSandboxProvider(POD).settings, AgentConfig("hi").pod_label(labels.LABEL_MANAGED_BY, "x")
        )


def test_bypass_follows_the_worker_env_as_on_the_pod_provider() -> None:
    config = AgentConfig("hi", permission_mode=PermissionMode.BYPASS_PERMISSIONS).scoped(RUN, "a")
    allowed = {"IRONFLOW_ALLOW_BYPASS": "1", "CLAUDE_CODE_USE_BEDROCK": "1"}
    sandbox_steps.check_step(AgentSandboxProvider(POD).settings, config, worker_env=allowed)
    POD.manifests(config, worker_env=allowed)  # the reference accepts it too
    with pytest.raises(errors.StepConfigError) as on_pod:
        POD.manifests(config, worker_env={})
    with pytest.raises(errors.StepConfigError) as on_sandbox:
        sandbox_steps.check_step(AgentSandboxProvider(POD).settings, config, worker_env={})
    assert str(on_sandbox.value) == str(on_pod.value)


def test_claim_labels_come_from_the_steps_scope_only() -> None:
    """Run identity is the scope's: a run label on the pod provider or the step's pod labels is not read back."""
    pod = POD.pod_label(labels.LABEL_ROOT_RUN_ID, "elsewhere")
    config = AgentConfig("hi").scoped(RUN, "s", root_run_id="root").pod_label(labels.LABEL_RUN_ID, "other")
    claim = sandbox_steps.claim_manifest(AgentSandboxProvider(pod).settings, config, name="c1", now=0)
    assert claim["metadata"]["labels"] == {
        labels.LABEL_ROOT_RUN_ID: "root",
        labels.LABEL_RUN_ID: RUN,
        labels.LABEL_STEP: "s",
        labels.LABEL_MANAGED_BY: "ironflow",
        labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_CLAIM,
    }


def test_an_unscoped_step_claim_carries_no_run_labels() -> None:
    claim = sandbox_steps.claim_manifest(AgentSandboxProvider(POD).settings, AgentConfig("hi"), name="c1", now=0)
    assert set(claim["metadata"]["labels"]) == {labels.LABEL_MANAGED_BY, labels.LABEL_COMPONENT}


def test_account_kind_follows_the_auth_proxy() -> None:
    assert AgentSandboxProvider(POD).account_kind() is None
    assert AgentSandboxProvider(PROXIED).account_kind() == "claude_subscription"


def test_has_condition_reads_status_conditions() -> None:
    obj = {"status": {"conditions": [{"type": "Finished", "status": "True", "reason": "PodSucceeded"}]}}
    assert claims.has_condition(obj, "Finished")
    assert not claims.has_condition(obj, "Ready")
    assert not claims.has_condition({}, "Finished")


SETTINGS = {
    "pod": {"image": "ghcr.io/acme/claude-runner:1", "sandboxed": True, "namespace": "agents"},
    "template": "claude",
    "warm_pool": "hot",
    "replicas": 4,
    "api_version": "v1alpha1",
    "ready_timeout_seconds": 30,
    "network_policy": {"ingress": [], "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}]}]},
}


def test_settings_load_from_a_mapping() -> None:
    p = AgentSandboxProvider.from_dict(SETTINGS)
    s = p.settings
    assert (s.namespace, s.template, s.pool, s.replicas, str(s.api_version), s.ready_timeout_s) == (
        "agents",
        "claude",
        "hot",
        4,
        "v1alpha1",
        30.0,
    )
    template, _ = sandbox_steps.template_objects(p.settings)
    assert template["spec"]["networkPolicy"]["egress"] == SETTINGS["network_policy"]["egress"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"replica": 1}, r"^unknown key 'replica'; did you mean 'replicas'\?$"),
        ({"pod": None}, r"^pod: is required: the pod settings"),
        ({"pod": {"image": "img"}}, r"^pod: must set 'sandboxed: true'"),
        ({"pod": {"image": "img", "sandboxed": True, "namespace": 3}}, r"^pod: namespace: must be a string, got int$"),
        ({"replicas": "3"}, r"^replicas: must be an integer, got str$"),
        ({"replicas": True}, r"^replicas: must be an integer, got bool$"),
        ({"template": 7}, r"^template: must be a string, got int$"),
        ({"ready_timeout_seconds": "soon"}, r"^ready_timeout_seconds: must be a number, got str$"),
        ({"network_policy": "open"}, r"^network_policy: must be default, unmanaged, or \{ingress"),
        ({"network_policy": {"egress": {}}}, r"^network_policy\.egress: must be a list, got dict$"),
        ({"network_policy": {"egres": []}}, r"^network_policy: unknown key 'egres'; did you mean 'egress'\?$"),
        ({"network_policy": {"egress": [{"port": []}]}}, r"^network_policy\.egress\[0\]: unknown key 'port'; did you"),
        ({"api_version": "v2"}, "v1alpha1 or v1beta1"),
    ],
)
def test_bad_settings_are_refused_by_key_path(change: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        AgentSandboxProvider.from_dict({**SETTINGS, **change})


def test_a_pod_settings_file_alone_is_read_only_when_asked(tmp_path: Path) -> None:
    """``sandbox render`` / ``apply-template`` take the pod settings alone; the step commands need ``pod:``."""
    path = tmp_path / "pod.yaml"
    path.write_text("image: img\nsandboxed: true\nnamespace: agents\n")
    assert AgentSandboxProvider.from_file(path, pod_settings_alone=True).settings.namespace == "agents"
    with pytest.raises(errors.ConfigError, match=r"^unknown key 'image'"):
        AgentSandboxProvider.from_file(path)
    path.write_text("image: img\n")
    with pytest.raises(errors.ConfigError, match=r"^provider file '.*pod\.yaml' must set 'sandboxed: true'"):
        AgentSandboxProvider.from_file(path, pod_settings_alone=True)


def test_settings_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot read provider file"):
        AgentSandboxProvider.from_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pod: [\n")
    with pytest.raises(errors.ConfigError, match="is not valid YAML"):
        AgentSandboxProvider.from_file(bad)


def test_a_proxied_pod_under_the_default_network_policy_is_warned_about() -> None:
    (warning,) = sandbox_steps.template_warnings(AgentSandboxProvider(PROXIED).settings)
    assert "may not reach the auth proxy at http://auth-proxy.ironflow:8080" in warning
    unmanaged = AgentSandboxProvider(PROXIED).network_policy(None, managed=False)
    assert sandbox_steps.template_warnings(unmanaged.settings) == ()
    assert sandbox_steps.template_warnings(AgentSandboxProvider(POD).settings) == ()


def test_provider_repr_holds_no_admin_key_or_env_value() -> None:
    pod = PROXIED.auth_proxy_admin_key("admin-key-value-123").env("API_HINT", "plain-value-456")
    text = repr(AgentSandboxProvider(pod))
    assert find_leaks(["admin-key-value-123", "plain-value-456"], text) == []


def test_the_provider_satisfies_the_agent_provider_protocol() -> None:
    from ironflow.provider import AgentProvider

    assert isinstance(AgentSandboxProvider(POD), AgentProvider)


def test_relays_in_the_pod_settings_are_refused_not_silently_dropped() -> None:
    relay = {
        "host": "api.example.com",
        "credential_secret": {"secret": "api", "key": "token"},
        "injection": "bearer",
    }
    pod = {"image": "ghcr.io/acme/claude-runner:1", "sandboxed": True, "auth_proxy": "http://p:8080", "relays": [relay]}
    with pytest.raises(errors.ConfigError, match="agent-sandbox does not deliver relays yet"):
        AgentSandboxProvider.from_dict({"pod": pod})
