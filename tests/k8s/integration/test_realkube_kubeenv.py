"""KubeEnv's own promises: stopping a cluster leaves no process behind, and a killed test
process takes its cluster with it. Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ironflow.testing.kubeenv import KubeEnv, KubeEnvNotAvailable, find_bin_dir
from ironflow.testing.polling import eventually_sync


def test_stop_leaves_no_process_running() -> None:
    """A second cluster, started and stopped: every component's process group is gone."""
    try:
        find_bin_dir()
    except KubeEnvNotAvailable as exc:
        pytest.skip(str(exc))
    env = KubeEnv(agent_sandbox=False)
    with env:
        pids = env.pids
        workdir = env.workdir
        assert len(pids) == 5
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    assert env.workdir is None
    assert workdir is not None
    assert not workdir.exists()
    survivors = [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
    assert survivors == []
    for entry in os.listdir("/proc"):  # nothing else still points at the removed work dir
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            assert str(workdir).encode() not in cmdline, entry


def test_a_killed_test_process_takes_its_cluster_with_it(tmp_path: Path) -> None:
    """SIGKILL of the Python process that started the cluster: every component dies with it."""
    try:
        find_bin_dir()
    except KubeEnvNotAvailable as exc:
        pytest.skip(str(exc))
    script = tmp_path / "holder.py"
    script.write_text(
        "import time\n"
        "from ironflow.testing.kubeenv import KubeEnv\n"
        "env = KubeEnv(agent_sandbox=False)\n"
        "env.start()\n"
        "print(' '.join(map(str, env.pids)), env.workdir, flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None
        *pids, workdir = holder.stdout.readline().split()
        holder.kill()

    def alive() -> list[str]:
        return [p for p in pids if Path(f"/proc/{p}").exists()]

    try:
        eventually_sync(lambda: not alive(), interval_s=0.1, what=lambda: f"every component to die; alive: {alive()}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
