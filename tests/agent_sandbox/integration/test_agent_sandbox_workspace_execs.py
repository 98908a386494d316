"""A git workspace's execs in a warm pod, run for real: each exec a bubblewrap of its own on the
pod's HOME (a host dir shared by the execs, as the pod's emptyDir is), the step's with the warm
pod's idle loop as its PID 1. The clone goes through the real auth proxy's secret relay to a
real ``git http-backend``; the step's report is the pod backend's frame, after every process
the step left is killed; a base the step rigged is caught."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.fakes.git_server import GitServer, seed_forge

from ironflow.agent_sandbox import patterns, workspace_execs
from ironflow.auth_proxy import AuthProxyConfig, issuing, run_auth_proxy
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.claude import layout
from ironflow.secrets import Secret
from ironflow.workspaces import Change, Workspace, WorkspaceChanges, frames

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

ADMIN = "admin-key-" + "x" * 40
HOST = "git.example.test"
SPEC = Workspace(f"https://{HOST}/org/repo.git", ref="main")
USER = "x-access-token"
PASSWORD = "ghs_REAL-GIT-HOST-PASSWORD-for-the-warm-pod"


@dataclass
class Pod:
    home: Path
    proxy_url: str
    token: Secret

    def _bwrap(self, *, idle_pid1: bool) -> list[str]:
        argv = ["bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
                "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/home"]  # fmt: skip
        argv += ["--bind", str(self.home), layout.SANDBOX_HOME]
        return [*argv, "--as-pid-1"] if idle_pid1 else argv

    def clone(self) -> subprocess.CompletedProcess[bytes]:
        raw = self.token.reveal().encode()
        argv = workspace_execs.clone_exec(self.proxy_url, SPEC, len(raw))
        env = {"PATH": os.environ["PATH"], "HOME": layout.SANDBOX_HOME}
        return subprocess.run([*self._bwrap(idle_pid1=False), *argv], input=raw, env=env, capture_output=True,
                              timeout=60, check=False)  # fmt: skip

    def step(self, shell: str, commit: str, *, idle_pid1: bool = True) -> str:
        """The step's exec, as a child of the idle loop (PID 1); its stdout once the frame is out."""
        wrapped = workspace_execs.step_command(shell, SPEC, commit)
        out = self.home / "step.out"  # the exec's stdout, as the API relays it (here through HOME)
        inside = f"{layout.SANDBOX_HOME}/step.out"
        env = {"PATH": os.environ["PATH"], "HOME": layout.SANDBOX_HOME, "IRONFLOW_STEP": wrapped}
        if idle_pid1:  # PID 1 becomes the warm pod's idle loop; the exec is its child
            inner = f'sh -c "$IRONFLOW_STEP" > {inside} 2>&1 & exec sh -c {_quote(patterns.IDLE_COMMAND)}'
        else:
            inner = f'sh -c "$IRONFLOW_STEP" > {inside} 2>&1'
        proc = subprocess.Popen([*self._bwrap(idle_pid1=idle_pid1), "sh", "-c", inner], env=env)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                text = out.read_text() if out.exists() else ""
                if '"type":"ironflow_workspace"' in text and text.endswith("}\n"):
                    time.sleep(0.3)  # anything the step left would print meanwhile
                    return out.read_text()
                time.sleep(0.05)
            raise AssertionError(f"no frame: {out.read_text() if out.exists() else ''}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=10)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.fixture
async def pod(tmp_path: Path) -> AsyncIterator[Pod]:
    seed_forge(tmp_path, HOST, {"calc.py": "def add(a, b):\n    return a - b\n", "notes.txt": "old notes\n"})
    home = tmp_path / "home"
    home.mkdir()
    async with GitServer(tmp_path / "forge", username=USER, password=PASSWORD) as server:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), secret_upstream=server.url)
        async with run_auth_proxy(config) as proxy, proxy.admin_client() as admin:
            secret = GitHosts({HOST: GitCredential(Secret(PASSWORD), USER)}).secret_for(HOST)
            token_id, token = await issuing.issue_secret_token(admin, secret, "run-ws", "fix", int(time.time()) + 300)
            yield Pod(home, proxy.url, token)
            await issuing.revoke_step_token(admin, token_id)


async def _cloned(pod: Pod) -> str:
    done = await asyncio.to_thread(pod.clone)  # the proxy answers on this test's loop
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert PASSWORD.encode() not in done.stdout + done.stderr
    commit = workspace_execs.parse_commit(done.stdout)
    assert (pod.home / "workspace" / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
    config = (pod.home / "workspace" / ".git" / "config").read_text()
    assert pod.token.reveal() not in config
    assert PASSWORD not in config
    return commit


def _changes(stdout: str) -> tuple[str, WorkspaceChanges]:
    said, changes = frames.split_frame(stdout)
    assert changes is not None
    return said, changes


async def test_the_clone_goes_through_the_relay_and_the_step_reports_after_what_it_left_is_killed(pod: Pod) -> None:
    commit = await _cloned(pod)
    late = pod.home / "late"
    inside = f"{layout.SANDBOX_HOME}/late"
    calc = f"{workspace_execs.WORKSPACE}/calc.py"
    shell = (
        "echo fixed >> calc.py; rm notes.txt; (while :; do echo noise; sleep 0.01; done) & "
        f"setsid sh -c 'sleep 3; echo late > {inside}; echo late >> {calc}' & sleep 0.2; echo started"
    )
    said, changes = _changes(await asyncio.to_thread(pod.step, shell, commit))
    assert "started" in said.splitlines()
    # A shell whose child the reap killed first may say so ("Killed"): before the frame, as all it printed.
    assert set(said.splitlines()) <= {"noise", "started", "Killed", ""}
    assert {f.path: f.change for f in changes.files} == {"calc.py": Change.MODIFIED, "notes.txt": Change.DELETED}
    assert b"+fixed" in changes.patch
    assert b"+late" not in changes.patch, changes.patch.decode()
    await asyncio.sleep(3.5)  # past the detached process's own sleep
    assert not late.exists(), "the detached process was killed before it wrote"


async def test_a_base_the_step_rigged_fails_the_report(pod: Pod) -> None:
    commit = await _cloned(pod)
    base = workspace_execs.BASE
    rig = f"echo fixed >> calc.py && rm -rf {base}/git/objects/pack {base}/git/objects/?? && echo 0 > {base}/commit"
    with pytest.raises(Exception, match="no longer holds the starting commit"):
        _changes(await asyncio.to_thread(pod.step, rig, commit))


async def test_outside_a_warm_pod_the_report_refuses_rather_than_leave_processes_running(pod: Pod) -> None:
    commit = await _cloned(pod)
    with pytest.raises(Exception, match="PID 1 is not the warm pod's"):
        _changes(await asyncio.to_thread(functools.partial(pod.step, "echo fixed >> calc.py", commit, idle_pid1=False)))
