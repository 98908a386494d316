"""A sandbox the kernel kills at its memory limit says so (issue 31: it exited 137 with no
message): the command's result names the limit, an agent step fails with it, and ``ironflow
exec`` prints it as its error line (real bubblewrap, gVisor and Docker, real memory cgroups)."""

from __future__ import annotations

import functools
import shutil

import pytest
from tests.fakes.local_sandbox import ALL_ISOLATIONS, PODMAN_GAPS, local_sandbox, on_podman
from typer.testing import CliRunner

import ironflow
from ironflow import errors
from ironflow.cli import app
from ironflow.cli import one_shot as cli_exec
from ironflow.local import OfflineProvider
from ironflow.local.sandbox import cgroups
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox.limits import SandboxLimits
from ironflow.local.sandbox_provider import LocalSandboxProvider

SUPPORT = cgroups.probe()
pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif("memory" not in SUPPORT.controllers, reason=SUPPORT.describe()),
]

#: Allocates 1 GiB, a page at a time touched.
HOG = ["python3", "-c", "b = [bytearray(64 << 20) for _ in range(16)]; print('allocated')"]
SAID = (
    "killed at the sandbox's memory limit of 64 MiB (SandboxLimits.memory_bytes): "
    "the kernel stopped 1 process that went past it"
)


@pytest.mark.parametrize("isolation", ALL_ISOLATIONS)
async def test_a_command_killed_at_the_memory_limit_says_so(
    isolation: Isolation, request: pytest.FixtureRequest
) -> None:
    provider = LocalSandboxProvider(isolation=isolation, timeout=60, limits=SandboxLimits(memory_bytes=64 << 20))
    result = await provider.run_command(HOG)
    assert result.exit_code == 137
    if on_podman(request) and result.killed is None:
        pytest.xfail(PODMAN_GAPS["oom"])
    assert result.killed == SAID
    quiet = await provider.run_command(["true"])
    assert (quiet.exit_code, quiet.killed) == (0, None)


@pytest.mark.parametrize("output", [[], ["-o", "json"]])
def test_ironflow_exec_prints_the_memory_kill_as_its_error_line(
    monkeypatch: pytest.MonkeyPatch, output: list[str]
) -> None:
    small = functools.partial(LocalSandboxProvider, limits=SandboxLimits(memory_bytes=64 << 20))
    monkeypatch.setattr(cli_exec, "LocalSandboxProvider", small)
    done = CliRunner().invoke(app.app, ["exec", *output, "--", *HOG])
    assert done.exit_code == 137, done.output
    assert done.stderr.strip().splitlines()[-1] == f"error: the command was {SAID}"
    if output:
        assert f'"killed": "{SAID}"' in done.stdout


@local_sandbox
async def test_an_agent_step_killed_at_the_memory_limit_fails_saying_so() -> None:
    """32 MiB is too little for the Claude Code CLI's node to start: the kernel kills it."""
    provider = OfflineProvider(timeout=60, limits=SandboxLimits(memory_bytes=32 << 20))
    with pytest.raises(errors.SandboxFailed) as raised:
        await provider.run(ironflow.AgentConfig("Say hello."))
    assert raised.value.reason == "OOMKilled"
    assert "killed at the sandbox's memory limit of 32 MiB (SandboxLimits.memory_bytes)" in str(raised.value)
    assert raised.value.retryable
