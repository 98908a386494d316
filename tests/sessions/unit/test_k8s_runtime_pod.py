"""The runtime as a session pod's main process: its address read from the pod, the token line a
delivery writes, and what a delivery's output says (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ironflow import errors
from ironflow.k8s.sessions import runtime_link, runtime_pod


def _pod(ports: list[dict[str, Any]], ip: str | None = "10.88.0.7") -> dict[str, Any]:
    status = {"podIP": ip} if ip else {}
    return {"spec": {"containers": [{"name": "sandbox", "ports": ports}]}, "status": status}


RUNTIME_PORT = {"name": "runtime", "containerPort": 8888, "protocol": "TCP"}


def test_the_address_is_the_pod_ip_only_when_its_container_declares_the_runtime() -> None:
    assert runtime_pod.address_of(_pod([RUNTIME_PORT]), "sandbox") == "10.88.0.7:8888"
    assert runtime_pod.address_of(_pod([RUNTIME_PORT], "fd00::7"), "sandbox") == "[fd00::7]:8888"
    assert runtime_pod.address_of(_pod([RUNTIME_PORT]), "other") is None  # another container's port
    assert runtime_pod.address_of(_pod([]), "sandbox") is None  # an idle pod of an older release
    assert runtime_pod.address_of(_pod([{**RUNTIME_PORT, "containerPort": 9999}]), "sandbox") is None
    assert runtime_pod.address_of(_pod([RUNTIME_PORT], None), "sandbox") is None  # no IP yet


def test_the_token_line_is_one_json_line_and_sets_the_sessions_own_settings() -> None:
    line = runtime_pod.token_line("tok", workspace="/home/claude/workspace", idle_timeout=30.0, max_upload_bytes=9)
    assert line.count(b"\n") == 1
    assert line.endswith(b"\n")
    assert json.loads(line) == {
        "token": "tok",
        "workspace": "/home/claude/workspace",
        "idle_timeout": 30.0,
        "max_upload_bytes": 9,
    }


def test_the_delivery_reads_its_line_by_size_and_never_names_the_token_in_its_argv() -> None:
    argv = runtime_pod.delivery_command(42, python="python3.11")
    assert argv[:4] == ("python3.11", "-I", "-S", "-c")
    assert argv[5:] == (runtime_pod.TOKEN_FIFO, "/opt/ironflow/runtime/server.py", "42", "20")


@pytest.mark.parametrize(
    ("stdout", "said"),
    [
        (b"ironflow-delivery: delivered\n", True),
        (b"noise\nironflow-delivery: absent\n", False),
        (b"", None),
        (b"python3: not found\n", None),
    ],
)
def test_what_a_delivery_said(stdout: bytes, said: bool | None) -> None:
    assert runtime_pod.delivered(stdout) is said


def test_an_image_without_the_runtime_idles_and_ends_on_sigterm() -> None:
    (line,) = runtime_pod.main_command()[2:]
    _, _, fallback = line.partition("; fi; ")
    assert fallback.startswith("trap 'exit 0' TERM")


def test_a_transport_is_one_of_three_and_a_bad_one_is_one_config_error() -> None:
    assert [runtime_link.check_transport(t) for t in ("auto", "http", "exec")] == ["auto", "http", "exec"]
    with pytest.raises(errors.ConfigError, match="session transport 'tcp' is not one of auto, http, exec"):
        runtime_link.check_transport("tcp")
