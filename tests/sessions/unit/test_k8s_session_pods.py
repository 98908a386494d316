"""A session pod: a command pod's hardening, its expiry and deadline from the ttl, its labels,
and the session read back from them."""

from __future__ import annotations

import json

import pytest

from ironflow import errors, labels
from ironflow.k8s.sessions import runtime_pod, session_pod
from ironflow.k8s.settings import K8sResources, ProviderSettings

SETTINGS = ProviderSettings(
    image="runner:1",
    namespace="team",
    resources=K8sResources(cpu_limit="1", memory_limit="1Gi"),
    runtime_class="gvisor",
    pod_labels={"cost": "ai"},
)


def _pod(**kwargs: object) -> dict[str, object]:
    options: dict[str, object] = {"ttl_s": 600.0, "now": 1000.0, **kwargs}
    return session_pod.session_pod("sbx-0123456789abcdef", SETTINGS, **options)  # type: ignore[arg-type]


def test_the_pod_is_hardened_as_a_command_pod() -> None:
    spec = _pod()["spec"]
    assert isinstance(spec, dict)
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["workingDir"] == "/home/claude"
    assert {"name": "ironflow-home", "mountPath": "/home/claude"} in container["volumeMounts"]
    # the two limits set, the other defaults kept (requests, ephemeral storage)
    assert container["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "10Gi"},
        "requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
    }
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["activeDeadlineSeconds"] == 660  # the ttl and the hardening's deadline margin
    assert container["command"] == runtime_pod.main_command()
    assert container["ports"] == [{"name": "runtime", "containerPort": 8888, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/", "port": "runtime"}


def test_the_pod_carries_no_token_and_runs_the_runtime_as_its_main_process_when_the_image_has_it() -> None:
    """The runtime is exec'd (pid 1), listens on 8888 and takes its tokens by its FIFO; nothing
    in the spec is a token (the whole manifest holds no bearer, no --token-fd/--token-file)."""
    pod = _pod()
    (line,) = [w for w in pod["spec"]["containers"][0]["command"] if "server.py" in w]  # type: ignore[index]
    assert "exec python3 -I -S /opt/ironflow/runtime/server.py --port 8888" in line
    assert "--token-fifo /home/claude/.ironflow/runtime-tokens" in line
    text = json.dumps(pod)
    for word in ("Bearer", "--token-fd", "--token-file", 'token":'):
        assert word not in text


def test_expiry_labels_and_the_session_read_back() -> None:
    pod = _pod(caller_labels={"team": "a"}, run_id="run-1", env={"A": "1"})
    meta = pod["metadata"]
    assert isinstance(meta, dict)
    assert meta["annotations"] == {labels.ANNOTATION_EXPIRES_AT: "1600"}
    assert meta["labels"][labels.LABEL_COMPONENT] == labels.COMPONENT_SANDBOX_SESSION
    assert meta["labels"][labels.LABEL_SESSION_ID] == "sbx-0123456789abcdef"
    meta["creationTimestamp"] = "1970-01-01T00:16:40Z"
    info = session_pod.info_of(pod, settings_labels=SETTINGS.pod_labels)
    assert info is not None
    assert (info.id, info.backend, info.isolation) == ("sbx-0123456789abcdef", "k8s", "gvisor")
    assert (info.created_at, info.expires_at, info.run_id) == (1000.0, 1600.0, "run-1")
    assert info.labels == {"team": "a"}
    meta["deletionTimestamp"] = "1970-01-01T00:20:00Z"
    assert session_pod.info_of(pod) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"caller_labels": {labels.LABEL_COMPONENT: "x"}}, "reserved"),
        ({"caller_labels": {labels.LABEL_SESSION_ID: "x"}}, "set by ironflow"),
        ({"caller_labels": {"k": "not a value"}}, "invalid value"),
        ({"run_id": "no spaces please"}, "not a Kubernetes label value"),
        ({"ttl_s": 0.0}, "ttl must be greater than zero"),
    ],
)
def test_bad_input_is_one_config_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        _pod(**kwargs)


def test_a_credential_in_the_environment_never_reaches_the_manifest() -> None:
    with pytest.raises(errors.StepConfigError, match="ANTHROPIC_API_KEY") as caught:
        _pod(env={"ANTHROPIC_API_KEY": "sk-ant-secret"})
    assert "sk-ant-secret" not in str(caught.value)
