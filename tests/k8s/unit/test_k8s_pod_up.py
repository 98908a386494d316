"""``PodUp`` service pods, rendered (pure): hardened as every ironflow pod, labelled so that
``release_run``'s selectors and the reaper take them with their run, their declared ports named
as the rendered NetworkPolicies open them, a readiness probe required."""

from __future__ import annotations

import doctest
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pytest

from ironflow import errors, labels
from ironflow.cluster import service_network
from ironflow.k8s import cleanup, reaper
from ironflow.k8s.commands import pod_ups, service_specs
from ironflow.k8s.commands.pod_ups import PodUp, Readiness
from ironflow.testing.k8s_validate import validate_manifest

NOW = 1_000


def db() -> PodUp:
    return PodUp("db", "postgres:16", "run-1").namespace("agents").port(5432).readiness(Readiness.tcp(5432))


def matches(selector: str, found: Mapping[str, str]) -> bool:
    """An equality-only label selector (what ``labels.selector`` writes) against ``found``."""
    return all(found.get(key) == value for key, value in (pair.split("=", 1) for pair in selector.split(",")))


def test_a_service_pod_is_hardened_as_every_ironflow_pod() -> None:
    pod = db().build_pod(now=NOW)
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert (spec["automountServiceAccountToken"], spec["enableServiceLinks"]) == (False, False)
    assert "command" not in container  # the image's own entrypoint
    validate_manifest(pod)


def test_release_run_and_the_reaper_select_a_service_pod_with_its_run() -> None:
    pod = db().root_run("root-1").lifetime(600).build_pod(now=NOW)
    found = pod["metadata"]["labels"]
    assert found[labels.LABEL_COMPONENT] == labels.COMPONENT_POD_UP
    for run in ("run-1", "root-1"):
        assert any(matches(s, found) for s in cleanup.run_selection(run).pods), run
    assert not any(matches(s, found) for s in cleanup.run_selection("run-2").pods)
    assert matches(labels.MANAGED_SELECTOR, found)  # the reaper lists these
    assert pod["spec"]["activeDeadlineSeconds"] == 600
    assert reaper.reap_reason(pod, NOW + 600) is None
    assert reaper.reap_reason(pod, NOW + 601) is reaper.ReapReason.EXPIRED


def test_declared_ports_get_the_names_the_rendered_policies_open() -> None:
    pod = db().port(8080).build_pod(now=NOW)
    (container,) = pod["spec"]["containers"]
    assert container["ports"] == [
        {"name": "svc-0", "containerPort": 5432, "protocol": "TCP"},
        {"name": "svc-1", "containerPort": 8080, "protocol": "TCP"},
    ]
    opened = set()
    for doc in service_network.policies("agents"):
        for rule in doc.body["spec"].get("ingress", []) + doc.body["spec"].get("egress", []):
            opened |= {p["port"] for p in rule["ports"]}
    assert opened == set(labels.SERVICE_PORT_NAMES)
    assert {p["name"] for p in container["ports"]} <= opened


@pytest.mark.parametrize(
    ("probe", "rendered"),
    [
        (Readiness.tcp(5432), {"tcpSocket": {"port": 5432}}),
        (Readiness.http("/healthz", 8080), {"httpGet": {"path": "/healthz", "port": 8080}}),
        (Readiness.exec("pg_isready", "-q"), {"exec": {"command": ["pg_isready", "-q"]}}),
    ],
)
def test_the_readiness_probe_is_the_callers(probe: Readiness, rendered: dict[str, Any]) -> None:
    (container,) = db().readiness(probe).build_pod(now=NOW)["spec"]["containers"]
    assert container["readinessProbe"] == {**rendered, "periodSeconds": 1, "failureThreshold": 3}


def test_scratch_command_args_env_and_uid_render() -> None:
    up = db().scratch("/var/lib/postgresql/data", "2Gi").scratch("/var/run/postgresql", "1Mi", memory=True)
    pod = up.command("postgres").args("-c", "fsync=off").env("PGDATA", "/var/lib/postgresql/data").restricted(999)
    rendered = pod.build_pod(now=NOW)
    (container,) = rendered["spec"]["containers"]
    assert (container["command"], container["args"]) == (["postgres"], ["-c", "fsync=off"])
    assert container["env"] == [{"name": "PGDATA", "value": "/var/lib/postgresql/data"}]
    assert container["securityContext"]["runAsUser"] == 999
    assert rendered["spec"]["volumes"][1] == {"name": "scratch-1", "emptyDir": {"sizeLimit": "1Mi", "medium": "Memory"}}
    validate_manifest(rendered)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PodUp("db", "postgres:16", "run-1").readiness(Readiness.tcp(1)).build_pod(), "declares no port"),
        (lambda: PodUp("db", "postgres:16", "run-1").port(1).build_pod(), "no readiness probe"),
        (lambda: PodUp("db", "postgres:16", ""), "needs the run it serves"),
        (lambda: PodUp("DB", "postgres:16", "r"), "not a valid name"),
        (lambda: db().port(5432), "declared twice"),
        (lambda: db().port(0), "TCP port number"),
        (lambda: db().label(labels.LABEL_RUN_ID, "other"), "from its run"),
        (lambda: db().label(labels.LABEL_COMPONENT, "x"), "reserved"),
        (lambda: db().restricted(0), "non-root"),
        (lambda: db().lifetime(float("inf")), "finite"),
        (lambda: Readiness(), "one of tcp"),
        (lambda: Readiness(tcp_port=1, command=("x",)), "one of tcp"),
        (lambda: Readiness.http("healthz", 80), "absolute path"),
        (lambda: db().scratch("/a").scratch("/a/").build_pod(), "two volumes mount at"),
    ],
)
def test_bad_service_pods_are_refused_with_one_line(build: Any, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        build()


def test_at_most_as_many_ports_as_the_policies_name() -> None:
    up = PodUp("db", "i", "r")
    for port in range(1, service_specs.MAX_PORTS + 1):
        up = up.port(port)
    with pytest.raises(errors.ConfigError, match="at most 8 ports"):
        up.port(100)


@pytest.mark.parametrize("module", [pod_ups, service_specs, service_network])
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
