"""A plain command run blocking (``ironflow exec``'s path, no event loop) is the same sandbox as
``run_command``'s: the same results, the same limits against a hostile step, and nothing of it
outlives the call, past its time limit or on Ctrl-C (real bubblewrap, real cgroups)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from ironflow import errors
from ironflow.command_result import CommandResult
from ironflow.local.sandbox import cgroups
from ironflow.local.sandbox.limits import SandboxLimits
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.testing.processes import argv_of

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

SUPPORT = cgroups.probe()


def _host_processes() -> int:
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def _cgroups_of(pid: int) -> list[str]:
    return [p for parent in SUPPORT.parents.values() for p in glob.glob(os.path.join(parent, f"ironflow-{pid}-*"))]


def _with_marker(marker: str) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and marker in " ".join(argv_of(int(p)))]


@pytest.fixture
def host_processes() -> Iterator[int]:
    before = _host_processes()
    yield before
    assert _host_processes() <= before + 20, "the sandbox left processes on the host"


def _same(result: CommandResult) -> CommandResult:
    return replace(result, duration=0.0)


@pytest.mark.parametrize(
    ("argv", "stdin"),
    [
        (["sh", "-c", "echo out; echo err >&2; exit 3"], None),
        (["cat"], b"fed\n" * 50_000),  # past a pipe's 64 KiB both ways: fed while read
        (["no-such-command"], None),
        (["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"], None),  # past what a result keeps
        (["sh", "-c", "printf '\\377\\376'; cat /proc/self/uid_map"], b""),
    ],
)
async def test_a_blocking_run_gives_run_commands_result(argv: list[str], stdin: bytes | None) -> None:
    provider = LocalSandboxProvider(timeout=60)
    assert provider.runs_blocking()
    pieces: list[tuple[str, bytes]] = []
    blocking = provider.run_command_blocking(argv, stdin=stdin, on_output=lambda s, d: pieces.append((s, d)))
    awaited = await provider.run_command(argv, stdin=stdin)
    assert _same(blocking) == _same(awaited)
    streamed = b"".join(d for s, d in pieces if s == "stdout").decode(errors="replace")
    assert streamed.startswith(blocking.stdout[:1000])
    assert sum(len(d) for s, d in pieces if s == "stdout") == blocking.stdout_bytes


def test_output_reaches_the_caller_as_it_is_written() -> None:
    provider = LocalSandboxProvider(timeout=60)
    heard: list[tuple[float, bytes]] = []
    start = time.monotonic()
    provider.run_command_blocking(
        ["sh", "-c", "echo first; sleep 1; echo second"], on_output=lambda _, d: heard.append((time.monotonic(), d))
    )
    assert [d for _, d in heard] == [b"first\n", b"second\n"]
    assert heard[0][0] - start < heard[1][0] - start - 0.5, "the first line came only at the end"


@pytest.mark.parametrize(
    ("script", "wrote"),
    [
        ("sleep {marker} & echo started; sleep {marker}", b"started\n"),
        ("echo started; exec >&- 2>&-; sleep {marker}", b"started\n"),  # its pipes closed, it lives on
    ],
)
def test_past_its_limit_the_whole_tree_is_killed_and_what_it_wrote_kept(
    script: str, wrote: bytes, host_processes: int
) -> None:
    provider = LocalSandboxProvider(timeout=60)
    marker = "31.5731"  # an argument no other process on the host has
    start = time.monotonic()
    with pytest.raises(errors.CommandTimeout) as caught:
        provider.run_command_blocking(["sh", "-c", script.format(marker=marker)], timeout_s=2)
    assert time.monotonic() - start < 15, "the limit did not hold"
    assert str(caught.value) == "command timed out after 2s"
    assert caught.value.stdout == wrote
    assert _with_marker(marker) == [], "a process of the sandbox outlived the call"
    assert _cgroups_of(os.getpid()) == []


@pytest.mark.skipif("pids" not in SUPPORT.controllers, reason=SUPPORT.describe())
def test_a_fork_bomb_is_capped_and_gone_before_the_call_returns(host_processes: int) -> None:
    provider = LocalSandboxProvider(timeout=4, limits=SandboxLimits(pids=32))
    peak = host_processes
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not done.wait(0.05):
            peak = max(peak, _host_processes())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        try:
            result = provider.run_command_blocking(["sh", "-c", "b(){ b|b& }; b; sleep 30"])
            assert result.exit_code != 0
        except errors.CommandTimeout:
            pass
    finally:
        done.set()
        watcher.join()
    assert peak <= host_processes + 32 + 20
    assert _host_processes() <= host_processes + 20  # gone before the call returned
    assert _cgroups_of(os.getpid()) == []


@pytest.mark.skipif("memory" not in SUPPORT.controllers, reason=SUPPORT.describe())
def test_memory_past_the_limit_is_killed_and_said() -> None:
    provider = LocalSandboxProvider(timeout=60, limits=SandboxLimits(memory_bytes=64 << 20))
    result = provider.run_command_blocking(["python3", "-c", "b = [bytearray(64 << 20) for _ in range(16)]"])
    assert result.exit_code == 137
    assert result.killed is not None
    assert "memory limit of 64 MiB" in result.killed
    assert _cgroups_of(os.getpid()) == []


@pytest.mark.parametrize(
    ("sent", "code", "said"), [(signal.SIGINT, 130, "error: aborted"), (signal.SIGTERM, 143, None)]
)
def test_ctrl_c_or_sigterm_ends_ironflow_exec_and_its_sandbox_with_it(sent: int, code: int, said: str | None) -> None:
    marker = f"32.68{sent}"
    cli = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]
    proc = subprocess.Popen(
        [*cli, "exec", "--", "sh", "-c", f"echo up; sleep {marker}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        proc.send_signal(sent)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, err
    if said is not None:
        assert err.decode().strip().splitlines()[-1] == said
    assert _with_marker(marker) == [], "the sandbox outlived ironflow exec"
    assert _cgroups_of(proc.pid) == [], "its cgroup outlived ironflow exec"


def test_what_needs_the_event_loop_is_refused_one_line() -> None:
    for provider in (
        LocalSandboxProvider(isolation="gvisor") if shutil.which("runsc") else None,
        LocalSandboxProvider(managed_settings={"permissions": {}}),
    ):
        if provider is None:
            continue
        assert not provider.runs_blocking()
        with pytest.raises(errors.ConfigError, match="use run_command"):
            provider.run_command_blocking(["true"])
