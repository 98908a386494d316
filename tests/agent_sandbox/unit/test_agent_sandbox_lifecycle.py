"""The pure parts of suspend/resume, pool status, wait and install, and the commands' bad input (exit 2, one line)."""

from __future__ import annotations

import time

import kubernetes_validate
import pytest
import yaml
from tests.fakes.sandbox_cli import run_sandbox

from ironflow import errors, labels
from ironflow.agent_sandbox import claims, install, lifecycle, models
from ironflow.cli.sandbox_lifecycle import parse_condition

NOW = 1_800_000_000.0


def stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - seconds_ago))


def pool(name: str, desired: int, replicas: int, ready: int) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"replicas": desired, "sandboxTemplateRef": {"name": "tpl"}},
        "status": {"replicas": replicas, "readyReplicas": ready},
    }


def claim(name: str, pool_name: str, sandbox: str | None, seconds_ago: float) -> dict[str, object]:
    status = {"sandbox": {"name": sandbox}} if sandbox else {}
    meta = {"name": name, "uid": f"uid-{name}", "creationTimestamp": stamp(seconds_ago)}
    return {"metadata": meta, "spec": {"warmPoolRef": {"name": pool_name}}, "status": status}


def sandbox_of(name: str, launch: str, owner_claim: str | None, owner_kind: str = "SandboxClaim") -> dict[str, object]:
    owners = [{"kind": owner_kind, "uid": f"uid-{owner_claim}", "controller": True}] if owner_claim else []
    return {"metadata": {"name": name, "labels": {labels.LABEL_SANDBOX_LAUNCH_TYPE: launch}, "ownerReferences": owners}}


def test_pool_status_counts_only_warm_adoptions_of_the_last_hour() -> None:
    pools = [pool("b", 3, 3, 2), pool("a", 1, 0, 0)]
    claims = [
        claim("c1", "b", "b-x1", 60),  # adopted a warm member a minute ago
        claim("c2", "b", "b-x2", 3000),  # adopted 50 minutes ago
        claim("c3", "b", "b-x3", 4000),  # adopted, but over an hour ago
        claim("c4", "b", "c4", 30),  # a cold start on the pool's template
        claim("c5", "b", None, 10),  # not bound yet
        claim("c6", "b", "b-x6", 10),  # bound to a member the claim does not own (still the pool's)
        claim("c7", "a", "a-x7", 10),
    ]
    sandboxes = [
        sandbox_of("b-x1", "warm", "c1"),
        sandbox_of("b-x2", "warm", "c2"),
        sandbox_of("b-x3", "warm", "c3"),
        sandbox_of("c4", "cold", "c4"),
        sandbox_of("b-x6", "warm", "pool-b", owner_kind="SandboxWarmPool"),
        sandbox_of("a-x7", "warm", "c7"),
    ]
    found = lifecycle.pool_statuses(pools, claims, sandboxes, now=NOW)
    assert [s.to_json() for s in found] == [
        {
            "name": "a",
            "namespace": "ns",
            "template": "tpl",
            "desired": 1,
            "replicas": 0,
            "ready": 0,
            "adoptedLastHour": 1,
        },
        {
            "name": "b",
            "namespace": "ns",
            "template": "tpl",
            "desired": 3,
            "replicas": 3,
            "ready": 2,
            "adoptedLastHour": 2,
        },
    ]


def test_a_pool_without_status_reads_as_zero() -> None:
    (status,) = lifecycle.pool_statuses([{"metadata": {"name": "p"}, "spec": {}}], [], [], now=NOW)
    assert (status.desired, status.replicas, status.ready, status.adopted_last_hour) == (0, 0, 0, 0)


def test_mode_patch_sets_only_the_operating_mode() -> None:
    assert lifecycle.mode_patch(models.OperatingMode.RUNNING) == {"spec": {"operatingMode": "Running"}}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("condition=Finished", ("Finished", "True")),
        ("condition=Ready=false", ("Ready", "False")),
        ("condition=Suspended=True", ("Suspended", "True")),
    ],
)
def test_parse_condition_reads_kubectl_wait_syntax(text: str, want: tuple[str, str]) -> None:
    assert parse_condition(text) == want


@pytest.mark.parametrize("text", ["delete", "condition=", "jsonpath={.status}", "condition=Ready=maybe", "Ready"])
def test_parse_condition_refuses_the_rest(text: str) -> None:
    with pytest.raises(errors.ConfigError, match="condition=TYPE"):
        parse_condition(text)


def test_the_install_manifests_are_the_kustomization_with_a_real_image() -> None:
    objects = install.controller_objects("example.com/asc:1")
    kinds = [o["kind"] for o in objects]
    assert kinds[:4] == ["CustomResourceDefinition"] * 4
    assert kinds[-1] == "Deployment"
    assert kinds.count("Deployment") == 1  # controller.yaml's own (without --extensions) is left out
    assert sorted(kinds[4:-1]) == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRoleBinding",
            "Service",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRole",
        ]
    )
    (container,) = objects[-1]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "example.com/asc:1"
    assert "--extensions" in container["args"]
    assert set(kinds) <= set(install.RESOURCES)
    for obj in objects:  # what ships is what the schemas validate against
        if obj["kind"] != "CustomResourceDefinition":
            kubernetes_validate.validate(obj, "1.33", strict=True)
    res = claims.resources(models.ApiVersion.V1BETA1)
    crd_names = {o["metadata"]["name"] for o in objects[:4]}
    assert crd_names == {f"{r.plural}.{r.group}" for r in (res.sandboxes, res.claims, res.templates, res.pools)}


def test_the_default_image_is_the_pinned_release() -> None:
    (deployment,) = [o for o in install.controller_objects() if o["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.k8s.io/agent-sandbox/agent-sandbox-controller:{install.CONTROLLER_VERSION}"
    assert "ko://" not in yaml.safe_dump_all(install.controller_objects())


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["suspend", "Bad_Name"], "invalid sandbox or claim name"),
        (["resume", "ok", "-n", "Bad"], "invalid namespace"),
        (["suspend", "ok", "--timeout", "soon"], "--timeout"),
        (["wait", "ok", "--for", "delete"], "condition=TYPE"),
        (["wait", "ok", "--for", "condition=Finished", "--timeout", "0s"], "--timeout"),
        (["pools", "-n", "UPPER"], "invalid namespace"),
        (["pools", "--kubeconfig", "no-such-kubeconfig.yaml"], "does not exist"),
        (["install", "-o", "table"], "use yaml or json"),
        (["install", "--apply", "-o", "table"], "use text, json or yaml"),
        (["install", "--image", "has space"], "invalid --image"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], said: str) -> None:
    code, out, err = run_sandbox(*args)
    assert code == 2, err
    assert out == ""
    assert said in err
    assert len(err.strip().splitlines()) == 1


def test_wait_needs_for() -> None:
    code, _, err = run_sandbox("wait", "x")
    assert code == 2
    assert "--for" in err


def test_install_prints_yaml_documents_or_a_json_list() -> None:
    code, out, _ = run_sandbox("install")
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == [o["kind"] for o in install.controller_objects()]
    code, out, _ = run_sandbox("install", "-o", "json")
    assert code == 0
    assert yaml.safe_load(out) == docs
