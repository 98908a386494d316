"""A step's or session's environment reaches the sandboxed process only, never the runtime's own host
process (bubblewrap, runsc), which runs on the host before any confinement (issue 34 M1); and loader
variables are refused before anything starts. Real bubblewrap and gVisor, a real ``LD_PRELOAD`` library."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import ISOLATIONS
from typer.testing import CliRunner

from ironflow import errors
from ironflow.cli.app import app
from ironflow.local import workdirs
from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import bwrap
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]

#: A library that says, on stderr, which executable loaded it, then connects to ``IFT_PORT`` on the
#: loopback: in the host's network namespace that connection arrives; in the sandbox's it cannot.
PRELOAD_C = r"""
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((constructor)) static void ift_loaded(void) {
    char exe[256] = {0};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) exe[0] = '?';
    dprintf(2, "ift-preload:%s\n", exe);
    const char *port = getenv("IFT_PORT");
    if (port == NULL) return;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(atoi(port))};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    connect(s, (struct sockaddr *)&to, sizeof to);
    close(s);
}
"""
#: Where the library's directory appears in the sandbox.
LIB_MOUNT = "/ift-lib"


@pytest.fixture
def preload(tmp_path: Path) -> Path:
    """The built library, in a directory of its own."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to build the LD_PRELOAD library")
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    (lib_dir / "preload.c").write_text(PRELOAD_C)
    built = lib_dir / "preload.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(built), str(lib_dir / "preload.c")], check=True)
    return built


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port on the host that counts who reached it (:func:`_arrived`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        server.setblocking(False)
        yield server


def _arrived(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def _loader_env(library: Path, server: socket.socket) -> dict[str, str]:
    # The host path for the runtime's process, the mounted one for the sandbox's (a missing one is skipped).
    return {"LD_PRELOAD": f"{library} {LIB_MOUNT}/{library.name}", "IFT_PORT": str(server.getsockname()[1])}


async def test_a_step_env_with_ld_preload_is_refused_before_anything_starts(
    preload: Path, listener: socket.socket
) -> None:
    env = _loader_env(preload, listener)
    provider = LocalSandboxProvider(timeout=30)
    mount = bwrap.ReadOnlyMount(str(preload.parent), LIB_MOUNT)
    with pytest.raises(errors.StepConfigError, match="env LD_PRELOAD is refused"):
        await provider.run_command(["true"], env=env, read_only_mounts=[mount])
    with pytest.raises(errors.StepConfigError, match="env LD_PRELOAD is refused"):
        LocalSandboxProvider(env=env)
    assert _arrived(listener) == 0


async def test_a_session_env_with_ld_preload_is_refused_before_anything_starts(
    preload: Path, listener: socket.socket, tmp_path: Path
) -> None:
    async with LocalSessions(LocalSandboxProvider(timeout=30), state_dir=str(tmp_path)) as sessions:
        with pytest.raises(errors.StepConfigError, match="env LD_PRELOAD is refused"):
            await sessions.open(OpenOptions(env=_loader_env(preload, listener), ttl=30))
        assert sessions.held() == []
    assert _arrived(listener) == 0


async def test_past_validation_the_library_loads_in_the_sandbox_only(
    preload: Path, listener: socket.socket, tmp_path: Path
) -> None:
    """The second layer: an environment that got past validation still never reaches bubblewrap itself."""
    provider = LocalSandboxProvider(timeout=30)
    env = {"PATH": "/usr/bin:/bin", **_loader_env(preload, listener)}
    mounts = (bwrap.ReadOnlyMount(str(preload.parent), LIB_MOUNT),)
    with workdirs.run_dir(str(tmp_path)) as tmp, sandbox_argv.sandbox_fds("bwrap", env) as fds:
        argv, binds = sandbox_argv.render(
            provider.shape(), ("sh", "-c", "true"), tmp=tmp, working_dir=None, mounts=mounts, proxy_socket=None,
            env=env, fds=fds,
        )  # fmt: skip
        finished = await provider.processes.run(
            argv, stdin=None, limit_s=30, sink=None, pass_fds=fds.inherited, binds=binds
        )
    said = finished.stderr.decode(errors="replace")
    assert finished.code == 0, said
    loaded = {line.split(":", 1)[1] for line in said.splitlines() if line.startswith("ift-preload:")}
    assert loaded, said  # the sandbox's shell had the variable
    assert not any(os.path.basename(exe) == "bwrap" for exe in loaded), said
    assert _arrived(listener) == 0  # nothing connected from the host's network namespace


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    parents[int(name)] = int(f.read().rsplit(b")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _runtime_environs(pids: list[int]) -> dict[int, bytes]:
    """The environment of each of ``pids`` that is the runtime's own binary (bwrap, runsc)."""
    out = {}
    for pid in pids:
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
            if exe in ("bwrap", "runsc"):
                with open(f"/proc/{pid}/environ", "rb") as f:
                    out[pid] = f.read()
        except OSError:
            continue
    return out


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_the_runtime_host_process_never_holds_the_step_env(isolation: Isolation) -> None:
    mark = f"ift-{uuid.uuid4().hex}"
    seen: dict[int, bytes] = {}

    def on_output(stream: str, data: bytes) -> None:
        if b"ready" in data and not seen:  # the sandbox runs: look at its host processes now
            seen.update(_runtime_environs(_descendants(os.getpid())))

    provider = LocalSandboxProvider(isolation=isolation, timeout=60)
    result = await provider.run_command(
        ["sh", "-c", "echo $IFT_MARK; echo ready; sleep 2"], env={"IFT_MARK": mark}, on_output=on_output
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == mark  # the sandboxed process has it
    assert seen, "no runtime process was found"
    assert not [pid for pid, environ in seen.items() if mark.encode() in environ]


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_session_runtime_host_process_never_holds_the_session_env(isolation: Isolation, tmp_path: Path) -> None:
    mark = f"ift-{uuid.uuid4().hex}"
    provider = LocalSandboxProvider(isolation=isolation, timeout=60)
    async with LocalSessions(provider, state_dir=str(tmp_path)) as sessions:
        sandbox = await sessions.open(OpenOptions(env={"IFT_MARK": mark}, ttl=60))
        try:
            done = await sandbox.commands.run(["sh", "-c", "echo $IFT_MARK"])
            assert done.stdout.strip() == mark
            pids = sessions.host_pids(sandbox.info.id)
            environs = _runtime_environs([*pids, *(d for p in pids for d in _descendants(p))])
            assert environs, "no runtime process was found"
            assert not [pid for pid, environ in environs.items() if mark.encode() in environ]
        finally:
            await sandbox.close()


async def test_a_mount_over_etc_is_refused_and_the_shadow_masks_hold() -> None:
    provider = LocalSandboxProvider(timeout=30)
    # /etc is refused first as the parent of a reserved path (the rule every backend shares), a
    # masked file by the local sandbox's own rule: either way, one line naming what it would expose
    for target, why in (("/etc", "hide reserved path '/etc/claude-code'"), ("/etc/shadow", "uncover '/etc/")):
        with pytest.raises(errors.ConfigError, match=f"cannot be mounted at '{target}': it would {why}"):
            await provider.run_command(["true"], read_only_mounts=[bwrap.ReadOnlyMount("/etc", target)])
    shown = await provider.run_command(["sh", "-c", "cat /etc/shadow 2>/dev/null | wc -c"])
    assert shown.stdout.strip() == "0"  # masked: nothing of the host's file


def test_ironflow_exec_refuses_a_mount_over_etc_in_one_line() -> None:
    done = CliRunner().invoke(app, ["exec", "--mount", "/etc:/etc", "--", "true"])
    assert done.exit_code == 2, done.stderr
    assert done.stderr.startswith("error: read-only volume cannot be mounted at '/etc': it would hide reserved path")
    assert done.stderr.count("\n") == 1
