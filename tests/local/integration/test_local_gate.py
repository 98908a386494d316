"""bubblewrap's gate (real bubblewrap): a gate closed before its release runs nothing, a released one runs the step."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox_provider import LocalSandboxProvider

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


async def _started(*, release: bool) -> tuple[int, bytes]:
    provider = LocalSandboxProvider(timeout=30)
    env = {"PATH": "/usr/bin:/bin"}
    with sandbox_argv.sandbox_fds("bwrap", env) as fds:
        assert fds.gate is not None
        argv, _ = sandbox_argv.render(
            provider.shape(), ("sh", "-c", "exit 7"), tmp=None, working_dir=None, mounts=(),
            proxy_socket=None, env=env, fds=fds,
        )  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            *argv, pass_fds=fds.inherited, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        fds.gate.release() if release else fds.gate.close()
        _, err = await proc.communicate()
    return proc.returncode or 0, err


async def test_a_gate_closed_unreleased_is_a_refused_argv_and_nothing_runs() -> None:
    code, err = await _started(release=False)
    assert code == 1
    assert b"requires --unshare-user" in err


async def test_a_released_gate_runs_the_step() -> None:
    code, err = await _started(release=True)
    assert code == 7, err


@pytest.mark.skipif(os.geteuid() != 0, reason="the host uid drop is a root worker's")
async def test_a_root_workers_gated_sandbox_reads_host_files_as_the_host_uid_not_root() -> None:
    """The gated start drops to the host uid (setpriv) as the one between fork and exec did."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as shown:  # /var is shown to the sandbox, /tmp is not
        os.chmod(shown, 0o755)  # noqa: S103 - the directory is traversable, the file in it root's only
        secret = os.path.join(shown, "root-only")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"root's")
        os.close(fd)
        result = await LocalSandboxProvider(timeout=30).run_command(["cat", secret])
    assert result.exit_code != 0
    assert "Permission denied" in result.stderr
    assert "root's" not in result.stdout
