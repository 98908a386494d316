"""A Docker sandbox's ``docker run`` argv and environment file: the pod's posture, the relay, no secret
on the command line, and the values the file cannot carry refused (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ironflow import errors
from ironflow.local.sandbox import bwrap, docker, environment
from ironflow.local.sandbox.limits import SandboxLimits

TOKEN = "ifap_secret-token-value"


def _argv(**changes: Any) -> list[str]:
    settings = docker.DockerSettings(command=("id", "-u"), image="ironflow-claude-runner:1", env_file="/run/d/env")
    return docker.docker_argv(dataclasses.replace(settings, **changes), "ironflow-0123")


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_container_has_the_pods_posture() -> None:
    argv = _argv()
    assert argv[:4] == ["docker", "run", "--name", "ironflow-0123"]
    for flag in ("--read-only", "--pull=never", "--interactive"):
        assert flag in argv
    assert _pairs(argv, "--user") == ["10001:10001"]
    assert _pairs(argv, "--cap-drop") == ["ALL"]
    assert _pairs(argv, "--security-opt") == ["no-new-privileges"]  # and no seccomp=unconfined
    assert _pairs(argv, "--network") == ["none"]
    assert _pairs(argv, "--log-driver") == ["none"]


def test_the_image_runs_the_command_itself_never_its_own_entrypoint() -> None:
    argv = _argv()
    assert argv[-4:] == ["--entrypoint", "id", "ironflow-claude-runner:1", "-u"]


def test_limits_and_bounded_tmpfs() -> None:
    limits = SandboxLimits(pids=32, memory_bytes=256 << 20, cpus=1.5, open_files=100, file_size_bytes=1 << 20)
    argv = _argv(limits=limits, home_size_bytes=2 << 20, tmp_size_bytes=3 << 20)
    assert _pairs(argv, "--pids-limit") == ["32"]
    assert _pairs(argv, "--memory") == _pairs(argv, "--memory-swap") == [str(256 << 20)]  # no swap
    assert _pairs(argv, "--cpu-quota") == ["150000"]
    assert _pairs(argv, "--ulimit") == ["nofile=100:100", f"fsize={1 << 20}:{1 << 20}"]
    tmpfs = _pairs(argv, "--tmpfs")
    assert f"/tmp:rw,nosuid,nodev,size={3 << 20},mode=1777" in tmpfs
    assert f"/home/claude:rw,nosuid,nodev,size={2 << 20},mode=0700,uid=10001,gid=10001" in tmpfs
    assert _pairs(argv, "--shm-size") == [str(3 << 20)]


def test_without_a_cpu_quota_the_sandbox_gets_a_lower_share() -> None:
    argv = _argv()
    assert "--cpu-quota" not in argv
    assert _pairs(argv, "--cpu-shares") == ["512"]


def test_the_proxy_socket_and_relay_are_bound_and_the_relay_starts_the_command() -> None:
    argv = _argv(proxy_socket="/t/proxy.sock", proxy_port=18080, forwarder_script="/pkg/forwarder.js",
                 egress=(18081, "/t/egress.sock"))  # fmt: skip
    mounts = _pairs(argv, "--mount")
    assert "type=bind,source=/t/proxy.sock,target=/run/ironflow/auth-proxy.sock,readonly" in mounts
    assert "type=bind,source=/pkg/forwarder.js,target=/run/ironflow/forwarder.js,readonly" in mounts
    assert "type=bind,source=/t/egress.sock,target=/run/ironflow/egress-proxy.sock,readonly" in mounts
    image = argv.index("ironflow-claude-runner:1")
    assert argv[image - 2 :] == [
        "--entrypoint", "node", "ironflow-claude-runner:1", docker.FORWARDER_PATH,
        "18080", bwrap.PROXY_SOCKET_PATH, "18081", bwrap.EGRESS_SOCKET_PATH, "--", "id", "-u",
    ]  # fmt: skip


def test_mounts_read_only_and_writable() -> None:
    argv = _argv(
        read_only_mounts=(bwrap.ReadOnlyMount("/srv/data", "/data"),),
        writable_mounts=(bwrap.WritableMount("/t/copy", "/workspace"),),
        working_dir="/workspace",
    )
    mounts = _pairs(argv, "--mount")
    assert "type=bind,source=/srv/data,target=/data,readonly" in mounts
    assert "type=bind,source=/t/copy,target=/workspace" in mounts
    assert _pairs(argv, "--workdir") == ["/workspace"]


@pytest.mark.parametrize(
    ("mount", "said"),
    [
        (bwrap.ReadOnlyMount("/srv", "/etc"), "it would hide reserved path"),
        (bwrap.ReadOnlyMount("/srv", "/tmp/x"), "reserved path '/tmp/x'"),
        (bwrap.ReadOnlyMount("srv", "/data"), "absolute host path"),
        (bwrap.ReadOnlyMount("/srv,readonly=false", "/data"), "without ','"),
    ],
)
def test_a_mount_that_cannot_work_is_refused(mount: bwrap.ReadOnlyMount, said: str) -> None:
    with pytest.raises(errors.ConfigError, match=said):
        _argv(read_only_mounts=(mount,))


def test_no_environment_value_is_on_the_argv() -> None:
    env = environment.sandbox_env(proxy_token=TOKEN)
    written = docker.env_file(env)
    assert f"ANTHROPIC_AUTH_TOKEN={TOKEN}\n".encode() in written
    argv = _argv(proxy_socket="/t/p.sock", proxy_port=18080, forwarder_script="/f.js")
    assert not [a for a in argv if TOKEN in a]
    assert _pairs(argv, "--env-file") == ["/run/d/env"]


@pytest.mark.parametrize("value", ["two\nlines", "carriage\r", "nul\0"])
def test_a_value_the_env_file_cannot_carry_is_refused_without_being_quoted(value: str) -> None:
    with pytest.raises(errors.ConfigError, match="environment file cannot carry") as raised:
        docker.env_file({"NAME": value})
    assert value not in str(raised.value)


def test_each_sandbox_dir_names_its_own_container_and_the_argv_names_it_back() -> None:
    first, second = docker.container_id("/tmp/r/docker-a"), docker.container_id("/tmp/r/docker-b")
    assert first != second
    assert docker.container_in(_argv()) == "ironflow-0123"
    assert docker.container_in(["bwrap", "--", "run"]) is None
