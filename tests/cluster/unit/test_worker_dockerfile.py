"""docker/worker/Dockerfile fits the Deployment ``ironflow manifests --worker-deployment`` renders:
the same numeric user, the ``ironflow`` command on PATH, the metrics port, a HOME on the only
writable mount, and no ``latest``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ironflow.cluster import setup, workloads

DOCKERFILE = Path(__file__).resolve().parents[3] / "docker" / "worker" / "Dockerfile"
LINES = [line for line in DOCKERFILE.read_text().splitlines() if line and not line.startswith("#")]


def _deployment_pod() -> dict[str, Any]:
    objs = setup.render(setup.ClusterSetup(worker_deployment=workloads.WorkerDeployment()))
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_the_image_runs_as_the_user_the_deployment_asserts() -> None:
    users = [line.split()[1] for line in LINES if line.startswith("USER ")]
    assert users == [f"{workloads.UID}:{workloads.UID}"]
    assert _deployment_pod()["securityContext"]["runAsUser"] == workloads.UID


def test_the_deployment_command_is_the_image_entrypoint_and_its_port_is_exposed() -> None:
    (entry,) = [json.loads(line.removeprefix("ENTRYPOINT ")) for line in LINES if line.startswith("ENTRYPOINT ")]
    (container,) = _deployment_pod()["containers"]
    assert container["command"] == entry
    assert f"EXPOSE {workloads.WORKER_METRICS_PORT}" in LINES
    assert "/tmp" in {m["mountPath"] for m in container["volumeMounts"]}
    assert any("HOME=/tmp" in line for line in LINES)
    assert ":latest" not in DOCKERFILE.read_text()
