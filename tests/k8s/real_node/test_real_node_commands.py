"""``PodRun``, ``JobRun`` and ``ironflow exec --backend k8s`` on the real node: the command runs in
the runner image under Pod Security ``restricted``, its exit code and its log come back as the
container wrote them (a failing command is a result, not an error), and its pod or Job is gone
after. A ``PodRun`` reads stdin written over ``pods/exec`` and writes to its scratch volume, on
runc and gVisor. The kwok tier (``test_k8s_runtime_ops.py``, ``test_k8s_runtime_cli_exec.py``) fakes the
container; here the kubelet runs it. Skipped when the node's binaries or the runner image are
missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ironflow.k8s.commands.pod_runs import JobRun, PodRun
from ironflow.kube import api as k8s
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

#: The first test of a session also waits for the node to start (up to ~100 s on a loaded machine).
pytestmark = pytest.mark.timeout(480)

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 180
#: Written to stdout and stderr both: the log is the container's, both streams (their order
#: between the two is the runtime's).
SAYS = "id -u; echo out; echo err >&2"
SAID = ["10001", "err", "out"]


async def nothing_left(api: k8s.KubeApi, ns: str) -> None:
    left: list[str] = []

    async def empty() -> bool:
        jobs = [f"job {o['metadata']['name']}" for o in (await api.list(k8s.JOBS, ns)).items]
        left[:] = jobs + [f"pod {o['metadata']['name']}" for o in (await api.list(k8s.PODS, ns)).items]
        return not left

    await eventually(empty, limit_s=60, interval_s=0.2, what=lambda: f"nothing in {ns}; left: {left}")


@pytest.mark.parametrize("kind", [PodRun, JobRun], ids=["PodRun", "JobRun"])
async def test_a_command_returns_its_log_and_exit_0_and_leaves_nothing(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], kind: type[PodRun] | type[JobRun]
) -> None:
    """A JobRun's pod is the real Job controller's; its Job goes with Background propagation and
    the real garbage collector removes the pod."""
    run = kind("says", need_image["runner"], SAYS).namespace(node_ns).restricted(read_only_root=True)
    out = await run.timeout(TIMEOUT_S).run(node_api)
    assert (out.success, out.phase, out.exit_code) == (True, "Succeeded", 0), out
    assert sorted(out.logs.splitlines()) == SAID
    await nothing_left(node_api, node_ns)


@pytest.mark.parametrize("kind", [PodRun, JobRun], ids=["PodRun", "JobRun"])
async def test_a_failing_command_is_a_result_with_its_own_exit_code_and_log(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], kind: type[PodRun] | type[JobRun]
) -> None:
    run = kind("fails", need_image["runner"], "echo oops; exit 7").namespace(node_ns).restricted(read_only_root=True)
    out = await run.timeout(TIMEOUT_S).run(node_api)
    assert (out.success, out.phase, out.exit_code) == (False, "Failed", 7), out
    assert out.logs == "oops\n"
    await nothing_left(node_api, node_ns)


def _exec(
    real_node: RealNodeEnv, tmp_path: Path, ns: str, image: str, *argv: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``ironflow exec --backend k8s`` as a user runs it: a provider file, ``$KUBECONFIG``, ``stdin`` piped."""
    provider = tmp_path / "provider.yaml"
    provider.write_text(f"image: {image}\nsandboxed: true\nnamespace: {ns}\n")
    env = {**os.environ, "KUBECONFIG": str(real_node.kubeconfig_path), "PYTHONPATH": str(ROOT / "src")}
    args = ["exec", "--backend", "k8s", "--provider", str(provider), "--timeout", str(TIMEOUT_S), "--", *argv]
    main = "from ironflow.cli.app import main; main()"
    command = [sys.executable, "-c", main, *args]
    return subprocess.run(command, env=env, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S + 60)


async def test_ironflow_exec_prints_the_commands_output_and_exits_with_its_code(
    real_node: RealNodeEnv, node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    ok = await asyncio.to_thread(
        _exec, real_node, tmp_path, node_ns, need_image["runner"], "sh", "-c", "id -u; echo hi"
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "10001\nhi\n"
    failed = await asyncio.to_thread(
        _exec, real_node, tmp_path, node_ns, need_image["runner"], "sh", "-c", "echo oops; exit 7"
    )
    assert failed.returncode == 7, failed.stderr
    assert failed.stdout == "oops\n"
    assert failed.stderr.startswith("error: the command exited with 7 in pod exec-")
    piped = await asyncio.to_thread(
        _exec, real_node, tmp_path, node_ns, need_image["runner"], "sh", "-c", "wc -c; echo done", stdin="hello\n"
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "6\ndone\n"
    await nothing_left(node_api, node_ns)


#: Reads stdin to the scratch volume, says its size and digest, and that the root is read-only.
FEED = (
    "cat > /scratch/in; wc -c < /scratch/in; sha256sum < /scratch/in | cut -c1-64; "
    "if touch /probe 2>/dev/null; then echo root-writable; else echo root-read-only; fi; exit 5"
)


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_a_pod_run_reads_its_stdin_and_writes_to_its_scratch_volume(
    node_ns: str, node_api: k8s.KubeApi, need_image: dict[str, str], runtime: str
) -> None:
    """More than one exec frame (256 KiB) and one pipe buffer of stdin, through the FIFO, into a
    sized scratch volume under a read-only root; the exit code comes back with its end reason."""
    data = os.urandom(300 * 1024)
    run = PodRun("feed", need_image["runner"], FEED).namespace(node_ns).restricted(read_only_root=True)
    run = run.stdin(data).scratch("/scratch", "16Mi").timeout(TIMEOUT_S)
    if runtime == "gvisor":
        run = run.runtime_class("gvisor")
    out = await run.run(node_api)
    assert (out.success, out.exit_code, out.reason) == (False, 5, "Error"), out
    assert out.logs.splitlines() == [str(len(data)), hashlib.sha256(data).hexdigest(), "root-read-only"]
    await nothing_left(node_api, node_ns)
