"""``ironflow temporal-worker`` refuses bad input with one line and exit 2, and an unreachable
server with one line and exit 3, before it polls anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ironflow.testing.ports import free_port

IRONFLOW = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]


def worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*IRONFLOW, "temporal-worker", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--task-queue", " "], "error: --task-queue must name a task queue"),
        (["--task-queue", "q", "--address", "nowhere"], "error: --address must be HOST:PORT (e.g. 127.0.0.1:7233)"),
        (["--task-queue", "q", "--address", "h:99999"], "error: --address must be HOST:PORT"),
        (["--task-queue", "q", "--workflows", "missing.py"], "error: workflow file 'missing.py' not found"),
        (["--task-queue", "q", "--provider", "missing.yaml"], "error: provider file 'missing.yaml' not found"),
        (["--task-queue", "q", "--backend", "k8s"], "error: --backend k8s needs --provider provider.yaml"),
        (["--task-queue", "q", "--account", "main"], "error: account 'main' must look like NAME=env:VAR"),
        (
            ["--task-queue", "q", "--backend", "k8s", "--session-pool", "2"],
            "error: --session-pool is for --backend local",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    done = worker(*args, "--address", f"127.0.0.1:{free_port()}") if "--address" not in args else worker(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(message)
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_account_on_a_provider_without_the_auth_proxy_is_refused(tmp_path: Path) -> None:
    provider = tmp_path / "provider.yaml"
    provider.write_text("image: busybox\ncluster: {kubeconfig: kc.yaml}\n")
    args = ["--task-queue", "q", "--backend", "k8s", "--provider", str(provider), "--account", "main=env:X"]
    done = worker(*args, "--address", f"127.0.0.1:{free_port()}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --account on --backend k8s: accounts need the auth proxy: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_workflow_file_without_workflows_is_bad_input(tmp_path: Path) -> None:
    empty = tmp_path / "flows.py"
    empty.write_text("X = 1\n")
    done = worker("--task-queue", "q", "--workflows", str(empty), "--address", f"127.0.0.1:{free_port()}")
    assert (done.returncode, done.stderr.strip()) == (2, f"error: {empty} defines no @workflow.defn class")


def test_a_sealing_key_that_cannot_be_read_or_is_malformed_is_one_line_without_the_key(tmp_path: Path) -> None:
    short = tmp_path / "short.key"
    short.write_text("hunter2-not-a-key\n")
    for path, message in [
        (tmp_path / "missing.key", f"error: --sealing-key: cannot read '{tmp_path / 'missing.key'}': "),
        (short, "error: --sealing-key: a sealing key is 32 random bytes in base64"),
    ]:
        done = worker("--task-queue", "q", "--sealing-key", str(path), "--address", f"127.0.0.1:{free_port()}")
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(message)
        assert len(done.stderr.strip().splitlines()) == 1
        assert "hunter2" not in done.stderr


def test_a_good_sealing_key_is_taken_and_the_worker_goes_on_to_connect(tmp_path: Path) -> None:
    from ironflow.temporal import new_sealing_key

    key = tmp_path / "sealing.key"
    key.write_text(new_sealing_key().reveal() + "\n")
    done = worker("--task-queue", "q", "--sealing-key", str(key), "--address", f"127.0.0.1:{free_port()}")
    assert done.returncode == 3, done.stderr  # past the key: the server is what is missing
    assert done.stderr.startswith("error: cannot reach the Temporal server")


def test_an_unreachable_server_is_one_line_and_exit_3() -> None:
    port = free_port()
    done = worker("--task-queue", "q", "--address", f"127.0.0.1:{port}")
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(f"error: cannot reach the Temporal server at 127.0.0.1:{port}: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_unreachable_server_ends_the_process_without_the_interpreters_teardown() -> None:
    """Once the SDK's core threads run, the interpreter's teardown may abort (temporalio/sdk-python#300:
    exit 134 for 3, 2 in 40 under load in CI's case): the worker leaves by ``os._exit`` on every
    path, so an exit handler registered before it never runs."""
    marked = "import atexit, sys; atexit.register(lambda: print('teardown ran', file=sys.stderr)); "
    argv = [sys.executable, "-c", marked + "from ironflow.cli.app import main; main()", "temporal-worker"]
    done = subprocess.run(
        [*argv, "--task-queue", "q", "--address", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stderr
    assert "teardown ran" not in done.stderr
