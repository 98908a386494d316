"""``--isolation docker`` end to end against a real daemon (Debian's dockerd in namespaces of its own,
:mod:`tests.fakes.docker_daemon`) and the runner image built from this tree: the CLI, an agent step
through the auth proxy's relay, a workspace, a release, and the refusals (no daemon, no image).
The hostile-step tests run on Docker from their own files (``ALL_ISOLATIONS``); sessions from
``test_docker_sessions.py``."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fakes import sandbox_cli
from tests.fakes.local_sandbox import DOCKER, PODMAN

import ironflow
from ironflow import errors
from ironflow.local import OfflineProvider
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.workspaces import Workspace

needs_client = pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client (apt-get install docker.io)")


@pytest.mark.parametrize("daemon", [DOCKER, PODMAN])
def test_exec_runs_the_command_in_a_container_as_uid_10001(daemon: str) -> None:
    done = sandbox_cli.ironflow_process("exec", "--isolation", "docker", "--", "id", "-u")
    assert (done.returncode, done.stdout, done.stderr) == (0, "10001\n", "")


@pytest.mark.docker
def test_exec_passes_the_commands_exit_code_and_stdin_through() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec", "--isolation", "docker",
         "--stdin", "--", "sh", "-c", "cat; exit 7"],
        input="piped\n", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (7, "piped\n"), done.stderr


@pytest.mark.docker
async def test_the_root_filesystem_is_mounted_read_only() -> None:
    """Not only unwritable by uid 10001: mounted read-only, so no uid could write it."""
    provider = LocalSandboxProvider(isolation="docker", timeout=60)
    result = await provider.run_command(["sh", "-c", "awk '$5 == \"/\" {print $6}' /proc/self/mountinfo"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split(",")[0] == "ro", result.stdout


@needs_client
def test_no_daemon_is_refused_with_one_line_and_exit_2(tmp_path: Path) -> None:
    nowhere = f"unix://{tmp_path}/docker.sock"
    done = sandbox_cli.ironflow_process("exec", "--isolation", "docker", "--", "true", env={"DOCKER_HOST": nowhere})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: no Docker daemon answers at {nowhere}: start Docker")
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.docker
def test_an_image_the_daemon_lacks_is_refused_and_never_pulled() -> None:
    with pytest.raises(errors.ConfigError, match="'ironflow-absent:1' is not in the Docker daemon"):
        LocalSandboxProvider(isolation="docker", docker_image="ironflow-absent:1")


@pytest.mark.docker
def test_agent_runs_the_images_claude_against_the_offline_model() -> None:
    done = sandbox_cli.ironflow_process("agent", "--isolation", "docker", "--fake-model", "Say hello from the sandbox")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hello from the sandbox! (offline fake model)"


@pytest.mark.docker
async def test_an_agent_step_reaches_the_model_through_the_relay_with_only_its_token() -> None:
    """The runner image's Claude Code CLI, the in-container relay (node) and the host's proxy."""
    async with OfflineProvider("hello from docker", isolation="docker", timeout=120) as provider:
        result = await provider.run(ironflow.AgentConfig("Say hello."))
    assert result.text == "hello from docker"


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="a Docker workspace needs a worker running as root")
async def test_a_workspace_is_the_working_directory_and_its_changes_come_back(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "kept.txt").write_text("one\n")
    provider = LocalSandboxProvider(isolation="docker", timeout=60)
    result = await provider.run_command(
        ["sh", "-c", "pwd; echo two >> kept.txt; echo new > added.txt"], workspace=Workspace(str(repo))
    )
    assert (result.exit_code, result.stdout) == (0, "/workspace\n"), result.stderr
    assert result.workspace is not None
    assert sorted(result.workspace.changed_paths) == ["added.txt", "kept.txt"]
    assert (repo / "kept.txt").read_text() == "one\n"  # the host's tree is untouched (no apply)


@pytest.mark.docker
async def test_release_run_ends_a_running_container() -> None:
    provider = LocalSandboxProvider(isolation="docker", timeout=60)
    task = asyncio.create_task(provider.run_command(["sleep", "30"], run_id="run-docker"))
    await asyncio.sleep(3)  # the container runs
    assert await provider.release_run("run-docker") == 1
    result = await asyncio.wait_for(task, 30)
    assert result.exit_code != 0
    assert result.duration < 30  # and no container is left (the daemon fixture checks)
