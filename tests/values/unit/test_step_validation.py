"""A step's Kubernetes-facing values are checked when the step is built, each refusal naming
the field (issue 19, item 12): nothing invalid reaches a renderer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ironflow import AgentConfig, PodSettings, SecretEnvVar, errors

BASE = AgentConfig("hi")
_GH = SecretEnvVar("GH", "gh", "token")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: BASE.pod_label("bad key", "v"), "pod_labels: label key 'bad key' is not valid"),
        (lambda: BASE.pod_label("-x.example.com/team", "v"), "its prefix must be a DNS subdomain"),
        (lambda: BASE.pod_label("team", "not ok!"), "pod_labels: label 'team' value 'not ok!' is not valid"),
        (lambda: BASE.pod_label("team", "x" * 64), "label 'team' value"),
        (lambda: BASE.egress_profile("no spaces"), "label 'ironflow.io/egress-profile' value 'no spaces'"),
        (lambda: BASE.env_from_secret("MY-VAR", "gh", "token"), "secret_env name must be an environment variable"),
        (lambda: BASE.env_from_secret("GH", "Not_A_Name", "token"), "secret_env GH: secret must be a Kubernetes"),
        (lambda: BASE.env_from_secret("GH", "gh", "a b"), "secret_env GH: key must be a Secret data key"),
        (lambda: BASE.replace(pod=PodSettings(secret_env=(_GH, _GH))), "secret_env sets GH twice"),
        (lambda: BASE.read_only_pvc("Repos!", "/data"), "read-only volume claim_name must be a Kubernetes object"),
        (lambda: BASE.read_only_config_map("cfg_1", "/data"), "read-only volume ConfigMap name must be a Kubernetes"),
        (lambda: BASE.read_only_host_path("/srv/../etc", "/data"), "host_path must be an absolute path without '..'"),
        (lambda: BASE.read_only_host_path("srv", "/data"), "host_path must be an absolute path"),
        (lambda: BASE.runtime_class("gVisor"), "runtime_class must be a Kubernetes object name"),
    ],
)
def test_an_invalid_value_is_refused_by_name_when_the_step_is_built(build: Callable[[], object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=None) as caught:
        build()
    assert message in str(caught.value)


def test_valid_values_pass() -> None:
    config = (
        BASE.pod_label("example.com/team", "platform")
        .pod_label("tier", "")
        .egress_profile("github")
        .env_from_secret("GH_TOKEN", "github-token", "token")
        .read_only_pvc("repos", "/data/repos")
        .read_only_host_path("/srv/cache", "/cache")
        .runtime_class("gvisor")
    )
    assert config.pod_labels["ironflow.io/egress-profile"] == "github"
    assert config.pod.runtime_class == "gvisor"
