"""A Docker session's ``docker run`` argv (the step's posture, the runtime, its two binds, its labels,
the daemon's init) and the sweep's rule (pure); the runtime's ``--commands-share-uid`` option."""

from __future__ import annotations

import dataclasses
import doctest

import pytest
from tests.sessions.unit.runtime_files import runtime_module

from ironflow import labels
from ironflow.local import workdirs
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap, docker
from ironflow.local.sessions import docker_runtime

SHAPE = sandbox_argv.SandboxShape("docker", (), 1 << 20, 1 << 20, None, None, image="runner:1")
OWNER = workdirs.Owner("boot", "pid:[1]", 42, 7)


def _argv(workspace: str | None = None) -> list[str]:
    return docker_runtime.session_argv(
        SHAPE, "/tmp/ifs-1", env_file="/tmp/ifs-1/env", workspace_copy=workspace, max_upload_bytes=9, owner=OWNER
    )


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_session_container_has_the_steps_posture_and_the_daemons_init() -> None:
    argv = _argv()
    for flag in ("--read-only", "--pull=never", "--interactive", "--init"):
        assert flag in argv
    assert (_pairs(argv, "--user"), _pairs(argv, "--cap-drop"), _pairs(argv, "--network")) == (
        ["10001:10001"],
        ["ALL"],
        ["none"],
    )
    assert not {"--publish", "-p", "--publish-all", "--expose"} & set(argv)


def test_the_runtime_listens_on_the_bound_socket_and_waits_for_its_token_on_stdin() -> None:
    argv = _argv()
    command = argv[argv.index("runner:1") + 1 :]
    assert _pairs(argv, "--entrypoint") == ["python3"]
    assert command[:3] == ["-I", "-S", "/ironflow-runtime/server.py"]
    for option in ("--isolate-commands", "--commands-share-uid", "--prewarm"):
        assert option in command
    assert (_pairs(command, "--unix"), _pairs(command, "--token-fd")) == (["/ironflow-session/rt.sock"], ["0"])
    mounts = _pairs(argv, "--mount")
    assert "type=bind,source=/tmp/ifs-1/s,target=/ironflow-session" in mounts
    assert "type=bind,source=/tmp/ifs-1/rt,target=/ironflow-runtime,readonly" in mounts


def test_with_a_proxy_the_relay_listens_first_and_then_starts_the_runtime_still_without_network() -> None:
    argv = docker_runtime.session_argv(
        SHAPE, "/tmp/ifs-1", env_file="/tmp/ifs-1/env", workspace_copy=None, max_upload_bytes=9, owner=OWNER,
        proxy_socket="/tmp/ifs-1/proxy.sock", egress_socket="/tmp/ifs-1/egress.sock",
    )  # fmt: skip
    command = argv[argv.index("runner:1") + 1 :]
    assert _pairs(argv, "--entrypoint") == ["node"]
    relay = [docker.FORWARDER_PATH, "18080", bwrap.PROXY_SOCKET_PATH, "18081", bwrap.EGRESS_SOCKET_PATH, "--"]
    assert command[: len(relay)] == relay
    assert command[len(relay) : len(relay) + 4] == ["python3", "-I", "-S", "/ironflow-runtime/server.py"]
    mounts = _pairs(argv, "--mount")
    assert f"type=bind,source=/tmp/ifs-1/egress.sock,target={bwrap.EGRESS_SOCKET_PATH},readonly" in mounts
    assert f"type=bind,source=/tmp/ifs-1/proxy.sock,target={bwrap.PROXY_SOCKET_PATH},readonly" in mounts
    assert _pairs(argv, "--network") == ["none"]


def test_a_workspace_is_the_runtimes_root() -> None:
    argv = _argv("/tmp/ifs-1/copy")
    assert "type=bind,source=/tmp/ifs-1/copy,target=/workspace" in _pairs(argv, "--mount")
    assert _pairs(argv, "--workdir") == ["/workspace"]
    assert _pairs(argv, "--workspace") == ["/workspace"]


def test_the_labels_name_the_session_selector_its_directory_and_owner() -> None:
    found = dict(item.partition("=")[::2] for item in _pairs(_argv(), "--label"))
    assert found == {
        labels.LABEL_MANAGED_BY: "ironflow",
        labels.LABEL_COMPONENT: labels.COMPONENT_SANDBOX_SESSION,
        labels.LABEL_SESSION_DIR: "/tmp/ifs-1",
        labels.LABEL_OWNER: workdirs.format_marker(OWNER).strip(),
    }
    assert workdirs.parse_marker(found[labels.LABEL_OWNER]) == OWNER


def test_the_sweep_removes_ended_containers_and_those_of_a_dead_owner() -> None:
    assert doctest.testmod(docker_runtime).failed == 0
    listed = [docker_runtime.ListedContainer("a", "paused", "live"), docker_runtime.ListedContainer("b", "dead", "")]
    assert docker_runtime.stale(listed, set()) == ["b"]


def test_commands_share_uid_goes_with_isolate_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with runtime_module("startup") as startup:
        assert startup.parse_args(["--unix", "x", "--isolate-commands", "--commands-share-uid"]).commands_share_uid
        with pytest.raises(SystemExit) as exited:
            startup.parse_args(["--unix", "x", "--commands-share-uid"])
    assert exited.value.code == 2
    assert "go with --isolate-commands" in capsys.readouterr().err


def test_on_podman_the_home_is_owned_by_u_and_nproc_is_bounded() -> None:
    """Podman 4 refuses a tmpfs's ``uid=`` and raises an nproc it is not given past what it may."""
    podman = docker_runtime.session_argv(
        dataclasses.replace(SHAPE, podman_nproc=32768), "/tmp/ifs-1", env_file="/tmp/ifs-1/env",
        workspace_copy=None, max_upload_bytes=9, owner=None,
    )  # fmt: skip
    home = next(t for t in _pairs(podman, "--tmpfs") if t.startswith("/home/claude:"))
    assert home.endswith(",mode=0700,U")
    assert "nproc=32768:32768" in _pairs(podman, "--ulimit")
    docker = next(t for t in _pairs(_argv(), "--tmpfs") if t.startswith("/home/claude:"))
    assert docker.endswith(",uid=10001,gid=10001")
    assert not any(u.startswith("nproc=") for u in _pairs(_argv(), "--ulimit"))
