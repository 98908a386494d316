"""``PodRun`` stdin and scratch volumes, rendered (pure): stdin never reaches the manifest or a repr,
the command reads it from a FIFO in a memory volume of its own, a scratch volume is a sized
``emptyDir`` mounted where the caller says (writable under a read-only root); the end reason
is read from the pod's status."""

from __future__ import annotations

import doctest
import json
from types import ModuleType

import pytest

from ironflow import errors
from ironflow.k8s.commands import pod_runs, specs
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.kube import pod_status
from ironflow.testing.k8s_validate import validate_manifest

SECRET = b"sk-ant-api03-not-a-real-one\x00\xff"


def feed() -> PodRun:
    return PodRun("feed", "runner:1", "wc -c; cat > /scratch/out").restricted(read_only_root=True)


def test_stdin_is_in_no_manifest_and_no_repr() -> None:
    run = feed().stdin(SECRET)
    pod = run.build_pod(now=0)
    text = json.dumps(pod)
    assert "sk-ant" not in text
    assert "sk-ant" not in repr(run)
    assert "sk-ant" not in repr(run.settings)


def test_a_command_with_stdin_reads_it_from_a_fifo_in_a_memory_volume_of_its_own() -> None:
    pod = feed().stdin(b"hello").build_pod(now=0)
    (container,) = pod["spec"]["containers"]
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert container["command"][3] == "wc -c; cat > /scratch/out"  # as $0: no quoting of the caller's line
    assert specs.STDIN_FIFO in container["command"][2]
    assert {"name": "ironflow-stdin", "mountPath": "/ironflow-stdin"} in container["volumeMounts"]
    assert {"name": "ironflow-stdin", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in pod["spec"]["volumes"]
    without = feed().build_pod(now=0)
    assert without["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", "wc -c; cat > /scratch/out"]
    assert "volumes" not in without["spec"]


def test_scratch_volumes_are_sized_empty_dirs_mounted_where_asked() -> None:
    run = feed().scratch("/scratch", "512Mi").scratch("/tmp", "64Mi", memory=True)
    pod = run.build_pod(now=0)
    (container,) = pod["spec"]["containers"]
    assert container["volumeMounts"] == [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "scratch-1", "mountPath": "/tmp"},
    ]
    assert pod["spec"]["volumes"] == [
        {"name": "scratch", "emptyDir": {"sizeLimit": "512Mi"}},
        {"name": "scratch-1", "emptyDir": {"sizeLimit": "64Mi", "medium": "Memory"}},
    ]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True  # scratch is the writable part


def test_stdin_scratch_and_a_claim_validate_strictly() -> None:
    pod = feed().stdin(b"x").scratch("/scratch").pvc("cache", "/cache").build_pod(now=0)
    validate_manifest(pod)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda r: r.scratch("scratch"), "scratch mount_path must be absolute"),
        (lambda r: r.scratch("/s", "lots"), "scratch size_limit"),
        (lambda r: r.scratch("/s", "0"), "greater than zero"),
        (lambda r: r.stdin("text"), "stdin must be bytes"),
    ],
)
def test_bad_stdin_and_scratch_are_refused_at_once(build: object, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message):
        build(feed())  # type: ignore[operator]


@pytest.mark.parametrize(
    "run",
    [
        feed().scratch("/data").pvc("claim", "/data/"),
        feed().scratch("/ironflow-stdin").stdin(b""),
    ],
    ids=["scratch-and-claim", "scratch-at-the-fifo"],
)
def test_two_volumes_at_one_path_are_refused_when_rendered(run: PodRun) -> None:
    with pytest.raises(errors.ConfigError, match="two volumes mount at"):
        run.build_pod(now=0)


def test_the_end_reason_is_the_pods_own_first_then_the_containers() -> None:
    terminated = {"name": "c", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
    assert pod_status.end_reason({"status": {"containerStatuses": [terminated]}}, "c") == "Error"
    stopped = {"status": {"reason": "DeadlineExceeded", "containerStatuses": [terminated]}}
    assert pod_status.end_reason(stopped, "c") == "DeadlineExceeded"
    assert pod_status.end_reason({"status": None}, "c") is None


@pytest.mark.parametrize("module", [specs, pod_status, pod_runs])
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
