"""A provider value Kubernetes would refuse is refused when the provider is built, naming the setting.

Each check runs the same for a builder chain and for a provider file (both build
``ProviderSettings``); the message names the setting and the bad value, never an env value.
"""

from __future__ import annotations

import doctest
from types import ModuleType
from typing import Any

import pytest

from ironflow import errors
from ironflow.k8s import K8sEphemeralProvider, K8sResources, settings
from ironflow.k8s.commands import pod_runs
from ironflow.kube import quantities

IMAGE = "ghcr.io/acme/claude-runner:2.1.332-1"


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(errors.ConfigError) as info:
        K8sEphemeralProvider.from_dict({"image": IMAGE, **data})
    return info.value.message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"namespace": "Agents"}, "namespace must be a DNS label (1-63 lowercase letters, digits and '-', starting"),
        ({"namespace": "a_b"}, "got 'a_b'"),
        ({"runtime_class": "G Visor"}, "runtime_class must be a RuntimeClass name (lowercase letters"),
        ({"resources": {"memory_limit": "4 GB"}}, "resources.memory_limit must be a non-negative Kubernetes quantity"),
        ({"resources": {"cpu_limit": "-1"}}, "resources.cpu_limit must be a non-negative Kubernetes quantity such as"),
        ({"sandbox": {"home_size_limit": "-1Gi"}}, "home_size_limit must be a non-negative Kubernetes quantity"),
        ({"sandbox": {"tmp_size_limit": "lots"}}, "tmp_size_limit must be a non-negative Kubernetes quantity"),
        ({"egress_profile": "web egress"}, "egress_profile must be a label value"),
        ({"egress_profile": ""}, "egress_profile must be a label value"),
        (
            {"env": {"MY-VAR": "x"}},
            "env name must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*), got 'MY-VAR'",
        ),
        (
            {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
            "env sets A twice; set each variable once",
        ),
        ({"pod_labels": {"bad key": "x"}}, "pod_labels: label key 'bad key' is not valid"),
        ({"pod_labels": {"team": "a b"}}, "pod_labels: label 'team' value 'a b' is not valid"),
        (
            {"node_selector": {"example.com/pool": "-x"}},
            "node_selector: label 'example.com/pool' value '-x' is not valid",
        ),
        ({"volumes": [{"host_path": "/srv/../etc", "mount_path": "/m"}]}, "volumes[0]: host_path must be an absolute"),
        (
            {"read_only_volumes": [{"host_path": "/srv/../etc", "mount_path": "/m"}]},
            "host_path must be an absolute path without '..'",
        ),
        (
            {"read_only_volumes": [{"config_map": "cm", "mount_path": "/m", "sub_path": "../x"}]},
            "sub_path '../x' must be relative, without empty, '.' or '..' segments",
        ),
    ],
)
def test_a_value_kubernetes_refuses_is_refused_at_build_naming_the_setting(data: dict[str, Any], message: str) -> None:
    assert message in refused(data)


def test_an_env_problem_never_shows_the_value() -> None:
    message = refused({"env": [{"name": "T", "value": "sk-ant-secret"}, {"name": "T", "value": "sk-ant-secret"}]})
    assert "sk-ant-secret" not in message


def test_the_builders_refuse_the_same_values() -> None:
    p = K8sEphemeralProvider(IMAGE)
    with pytest.raises(errors.ConfigError, match="namespace must be a DNS label"):
        p.namespace("Agents")
    with pytest.raises(errors.ConfigError, match="env sets A twice"):
        p.env("A", "1").env("A", "2")
    with pytest.raises(errors.ConfigError, match=r"resources\.memory_limit must be"):
        K8sResources(memory_limit="1.5.0Gi")


@pytest.mark.parametrize("value", ["500m", "2", "1.5", ".5", "4Gi", "128974848", "129e6", "1E3", "0"])
def test_valid_quantities_are_kept(value: str) -> None:
    p = K8sEphemeralProvider.sandboxed(IMAGE).resources(
        K8sResources(cpu_request=None, memory_request=None, cpu_limit=value, memory_limit=value)
    )
    assert p.home_size_limit(value).settings.resources.cpu_limit == value


def test_valid_names_and_labels_are_kept() -> None:
    p = K8sEphemeralProvider.from_dict(
        {
            "image": IMAGE,
            "namespace": "ironflow-agents",
            "runtime_class": "gvisor",
            "egress_profile": "github-only",
            "env": {"GIT_AUTHOR_NAME": "bot", "_X1": ""},
            "pod_labels": {"example.com/team": "platform", "tier": ""},
            "node_selector": {"kubernetes.io/os": "linux"},
        }
    )
    assert p.settings.namespace == "ironflow-agents"


@pytest.mark.parametrize("module", [quantities, pod_runs, settings])
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


@pytest.mark.parametrize(
    ("grace", "message"),
    [
        (-1, "image_pull_grace must be a finite number of seconds >= 0, got -1"),
        (float("inf"), "image_pull_grace must be a finite number of seconds >= 0, got inf"),
        ("60", "image_pull_grace must be a number of seconds or a timedelta, got str"),
        (True, "image_pull_grace must be a number of seconds or a timedelta, got bool"),
    ],
)
def test_image_pull_grace_is_refused_at_build_naming_the_field(grace: Any, message: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        K8sEphemeralProvider("img").image_pull_grace(grace)
    assert caught.value.message == message


def test_image_pull_grace_defaults_to_60s_and_reads_from_a_file() -> None:
    assert K8sEphemeralProvider("img").settings.image_pull_grace_s == 60.0
    assert K8sEphemeralProvider("img").image_pull_grace(0).settings.image_pull_grace_s == 0.0
    read = K8sEphemeralProvider.from_dict({"image": "img", "image_pull_grace_seconds": 15})
    assert read.settings.image_pull_grace_s == 15.0
    with pytest.raises(errors.ConfigError, match="image_pull_grace_seconds: must be a number, got str"):
        K8sEphemeralProvider.from_dict({"image": "img", "image_pull_grace_seconds": "soon"})
    with pytest.raises(errors.ConfigError, match="image_pull_grace must be a finite number of seconds >= 0"):
        K8sEphemeralProvider.from_dict({"image": "img", "image_pull_grace_seconds": -5})
