"""The seed's KRO graphs (concepts 07 and 08): who owns what, where the children go, how the
warm-pool pod waits, the scheduled runs' scripts, and what the graphs refuse."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ironflow import errors
from ironflow.agent_sandbox import catalog, kro, patterns
from ironflow.cli import sandbox
from ironflow.k8s.pod_provider import K8sEphemeralProvider

INSTANCE_NS = "${schema.metadata.namespace}"


def resources(rgd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in rgd["spec"]["resources"]}


def pod_spec(resource: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = resource["template"]["spec"]["podTemplate"]["spec"]
    return spec


def script(rgd: dict[str, Any]) -> str:
    cron = resources(rgd)["orchestrator"]["template"]
    text: str = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    return text


def test_kro_raw_runner_owns_a_sandbox_and_the_user_rgd_owns_sibling_pvcs_and_a_cronjob() -> None:
    runner, user = catalog.render_pattern("kro-raw")
    assert [r["template"]["kind"] for r in runner["spec"]["resources"]] == ["Sandbox"]
    ids = resources(user)
    assert ids["workspace"]["template"]["kind"] == ids["memory"]["template"]["kind"] == "PersistentVolumeClaim"
    assert ids["runner"]["includeWhen"] == ["${schema.spec.schedule == ''}"]
    assert ids["orchestrator"]["template"]["kind"] == "CronJob"
    assert ids["orchestrator"]["includeWhen"] == ["${schema.spec.schedule != ''}"]
    volumes = pod_spec(runner["spec"]["resources"][0])["volumes"]
    assert {"name": "pvc-0", "persistentVolumeClaim": {"claimName": "${schema.spec.workspacePVC}"}} in volumes


def test_kro_template_owns_template_pool_prompt_and_a_claim_kro_keeps() -> None:
    """The one-shot claim has no TTL: the controller would delete it and KRO would create it
    again, so the agent would run anew every TTL."""
    (rgd,) = catalog.render_pattern("kro-template")
    kinds = [r["template"]["kind"] for r in rgd["spec"]["resources"]]
    assert kinds[:4] == ["SandboxTemplate", "SandboxWarmPool", "ConfigMap", "SandboxClaim"]
    assert kinds[-1] == "CronJob"
    claim = resources(rgd)["claim"]["template"]
    assert "lifecycle" not in claim["spec"]
    assert claim["spec"]["warmPoolRef"]["name"] == "${schema.metadata.name}"
    assert "ttlSecondsAfterFinished: 300, shutdownPolicy: Delete" in script(rgd)  # scheduled claims expire


def test_kro_template_has_no_unused_proxy_configmap() -> None:
    """Audit item 2: the seed's ``<name>-proxy`` ConfigMap was mounted by no pod."""
    (rgd,) = catalog.render_pattern("kro-template")
    children = [r["template"] for r in rgd["spec"]["resources"]]
    names = [c["metadata"]["name"] for c in children if c["kind"] == "ConfigMap"]
    assert names == ["${schema.metadata.name}-prompt"]
    assert "proxyURL" not in rgd["spec"]["schema"]["spec"]


def test_kro_pods_authenticate_with_a_secret_reference() -> None:
    base = K8sEphemeralProvider.sandboxed(patterns.DEFAULT_IMAGE)
    provider = base.env_from_secret("ANTHROPIC_API_KEY", "claude", "key")
    (rgd,) = catalog.render_pattern("kro-template", patterns.PatternOptions(provider=provider))
    env = pod_spec(resources(rgd)["template"])["containers"][0]["env"]
    assert {"name": "ANTHROPIC_API_KEY", "valueFrom": {"secretKeyRef": {"name": "claude", "key": "key"}}} in env


@pytest.mark.parametrize("pattern", ["kro-raw", "kro-template"])
def test_every_child_lives_in_the_instance_namespace(pattern: str) -> None:
    """Audit item 4: the render-time namespace was baked into every child."""
    rgds = catalog.render_pattern(pattern, patterns.PatternOptions(namespace="render-time"))
    children = [r["template"] for rgd in rgds for r in rgd["spec"]["resources"]]
    assert children
    assert {c["metadata"]["namespace"] for c in children} == {INSTANCE_NS}
    assert "render-time" not in str(rgds)
    binding = next(c for c in children if c["kind"] == "RoleBinding")
    assert binding["subjects"][0]["namespace"] == INSTANCE_NS


def test_kro_pods_read_the_prompt_from_the_graphs_configmap() -> None:
    (rgd,) = catalog.render_pattern("kro-template")
    spec = pod_spec(resources(rgd)["template"])
    shell = spec["containers"][0]["command"][2]
    assert "'-p' \"$(cat '/etc/ironflow/prompt/prompt')\"" in spec["containers"][0]["command"][4]
    volume = next(v for v in spec["volumes"] if "configMap" in v and v["configMap"]["name"].endswith("-prompt"))
    assert volume["configMap"]["name"] == "${schema.metadata.name}-prompt"
    assert {"name": "podinfo", "mountPath": kro.PODINFO_DIR, "readOnly": True} in spec["containers"][0]["volumeMounts"]
    assert shell.startswith(f"while grep -q '^{kro.POOL_LABEL}=' '/etc/ironflow/podinfo/labels'; do sleep 1; done; ")
    assert resources(rgd)["pool"]["template"]["spec"]["replicas"] == "${schema.spec.replicas}"


def test_warm_pool_pods_have_no_deadline_and_the_agent_gets_it_from_adoption() -> None:
    """Audit item 1: the pool's pods kept ``activeDeadlineSeconds`` while idling."""
    raw, _ = catalog.render_pattern("kro-raw")
    deadline = pod_spec(raw["spec"]["resources"][0])["activeDeadlineSeconds"]  # starts at once: keeps it
    (rgd,) = catalog.render_pattern("kro-template")
    spec = pod_spec(resources(rgd)["template"])
    assert "activeDeadlineSeconds" not in spec
    sh, flag, wrapper, _, agent = spec["containers"][0]["command"]
    assert (sh, flag) == ("sh", "-c")
    assert wrapper.split("done; ", 1)[1] == f'exec timeout -k 10 {deadline} sh -c "$1"'
    assert agent.startswith("cd '/workspace' && 'claude' '-p' ")


def test_kro_raw_sandbox_starts_the_agent_at_once() -> None:
    runner, _ = catalog.render_pattern("kro-raw")
    spec = pod_spec(runner["spec"]["resources"][0])
    assert not spec["containers"][0]["command"][2].startswith("while ")
    assert all(v["name"] != "podinfo" for v in spec["volumes"])


def test_the_runner_script_waits_for_the_sandbox_to_exist_and_always_deletes_the_runner() -> None:
    """Audit item 3: ``kubectl wait`` on a Sandbox KRO had not made yet failed at once, and under
    ``set -e`` the Runner was never deleted."""
    _, user = catalog.render_pattern("kro-raw")
    lines = script(user).splitlines()
    trap = lines.index("""trap 'kubectl delete "$r" "$n" --ignore-not-found' EXIT""")
    create = lines.index("kubectl create -f - <<EOF")
    exists = lines.index('kubectl wait --for=create "sandbox/$n" --timeout=3600s')
    finished = lines.index('kubectl wait --for=condition=Finished "sandbox/$n" --timeout=3600s')
    assert trap < create < exists < finished


def test_the_claim_script_waits_for_its_claim_to_finish() -> None:
    """Audit item 3: concept 08's CronJob created the claim and did not wait."""
    (rgd,) = catalog.render_pattern("kro-template")
    text = script(rgd)
    assert text.index("c=$(kubectl create -o name") < text.index('kubectl wait --for=condition=Finished "$c"')
    assert 'kubectl logs "pod/$s"' in text


@pytest.mark.parametrize("pattern", ["kro-raw", "kro-template"])
def test_the_schedule_option_is_the_graphs_default(pattern: str) -> None:
    rgd = catalog.render_pattern(pattern, patterns.PatternOptions(schedule="*/30  * * * *"))[-1]
    assert rgd["spec"]["schema"]["spec"]["schedule"] == 'string | default="*/30 * * * *"'
    assert catalog.render_pattern(pattern)[-1]["spec"]["schema"]["spec"]["schedule"] == 'string | default=""'


@pytest.mark.parametrize("bad", ['0 * * *"', "every hour", "0 * * * * *", "@often"])
def test_a_bad_schedule_is_refused(bad: str) -> None:
    with pytest.raises(errors.ConfigError, match=re.escape(f"invalid schedule '{bad}': use five cron fields")):
        catalog.render_pattern("kro-template", patterns.PatternOptions(schedule=bad))


def test_render_takes_schedule_for_the_kro_patterns_only() -> None:
    app = typer.Typer()
    app.callback()(lambda: None)
    sandbox.register(app)
    ok = CliRunner().invoke(app, ["sandbox", "render", "kro-raw", "--schedule", "0 * * * *", "-o", "json"])
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)[-1]["spec"]["schema"]["spec"]["schedule"] == 'string | default="0 * * * *"'
    for args, message in [
        (["kro-template", "--schedule", "hourly"], "invalid schedule 'hourly': use five cron fields"),
        (["warm-pool", "--schedule", "0 * * * *"], "--schedule is for the kro-raw and kro-template patterns"),
    ]:
        bad = CliRunner().invoke(app, ["sandbox", "render", *args])
        assert bad.exit_code == 2
        assert message in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_the_runner_orchestrator_only_reads_sandboxes() -> None:
    _, user = catalog.render_pattern("kro-raw")
    rules = resources(user)["role"]["template"]["rules"]
    verbs = {r["resources"][0]: r["verbs"] for r in rules}
    assert verbs["claudecodeagentsandboxrunners"] == ["create", "get", "list", "watch", "delete"]
    assert verbs["sandboxes"] == ["get", "list", "watch"]


def _pod_specs(node: Any) -> list[dict[str, Any]]:
    """Every pod spec (a mapping with ``containers``) anywhere in a rendered object."""
    if isinstance(node, dict):
        here = [node] if "containers" in node else []
        return here + [spec for value in node.values() for spec in _pod_specs(value)]
    if isinstance(node, list):
        return [spec for value in node for spec in _pod_specs(value)]
    return []


@pytest.mark.parametrize("pattern", sorted(catalog.PATTERNS))
def test_every_pod_of_every_pattern_has_no_service_links(pattern: str) -> None:
    """The orchestrator CronJob's pod too: no other Service's address lands in a pod's env."""
    specs = _pod_specs(
        catalog.render_pattern(pattern, patterns.PatternOptions(schedule="0 * * * *", egress=(("10.0.0.0/8", 443),)))
    )
    assert specs
    assert [s.get("enableServiceLinks") for s in specs] == [False] * len(specs)
