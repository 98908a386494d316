"""Sandbox sessions under ``--isolation docker`` against a real daemon (:mod:`tests.fakes.docker_daemon`)
and the runner image built from this tree: a hardened container running the session runtime, reached
through a unix socket in a host directory, its token handed in after the start and found nowhere in
``docker inspect``; commands, files, a workspace's changes (on dockerd and on Podman's Docker API);
no container left at close, at the TTL,
or (at the next start) after its owner was SIGKILLed; ``ironflow sandbox serve --isolation docker``.
The session contract, the runtime
isolation, egress and agent-session tests run on Docker from their own files."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.fakes.docker_daemon import DockerDaemon
from tests.fakes.local_sandbox import DOCKER, PODMAN, on_podman
from tests.sessions.integration import serving

from ironflow import errors, labels
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions import docker_runtime
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sessions import OpenOptions, PoolPolicy
from ironflow.sessions.client import RuntimeClient
from ironflow.testing.polling import eventually
from ironflow.workspaces import Workspace

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(os.geteuid() != 0, reason="Docker sessions need a worker running as root"),
]


@pytest.fixture
def state() -> Iterator[Path]:
    """A short directory: a unix socket path holds at most 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="ifs-test-") as short:
        yield Path(short)


@pytest.fixture(params=[DOCKER, PODMAN])
async def sessions(request: pytest.FixtureRequest, state: Path) -> AsyncIterator[LocalSessions]:
    """Docker sessions on dockerd, and on Podman's Docker API."""
    async with LocalSandboxProvider(isolation="docker", timeout=60).sessions(state_dir=str(state)) as opened:
        yield opened


@pytest.fixture
def daemon(request: pytest.FixtureRequest) -> DockerDaemon:
    """The daemon the test's sessions run on."""
    found: DockerDaemon = request.getfixturevalue("podman_daemon" if on_podman(request) else "docker_daemon")
    return found


def _session_containers(daemon: DockerDaemon) -> list[str]:
    filters = [arg for f in docker_runtime.FILTERS for arg in ("--filter", f)]
    return daemon.docker("ps", "--all", "--quiet", *filters).stdout.split()


async def test_a_session_runs_in_a_hardened_container_as_uid_10001(sessions: LocalSessions) -> None:
    async with await sessions.open(OpenOptions(ttl=120, env={"B": "2"})) as sandbox:
        done = await sandbox.commands.run(["sh", "-c", "id -u; pwd; echo $B"])
        assert (done.exit_code, done.stdout) == (0, "10001\n/home/claude\n2\n"), done
        root = await sandbox.commands.run(["sh", "-c", "awk '$5 == \"/\" {print $6}' /proc/self/mountinfo"])
        assert root.stdout.split(",")[0] == "ro", root
        caps = await sandbox.commands.run(["sh", "-c", "grep -E '^Cap(Prm|Eff|Amb|Bnd)' /proc/self/status"])
        assert [line.split()[1] for line in caps.stdout.splitlines()] == ["0" * 16] * 4, caps.stdout
        links = await sandbox.commands.run(["ls", "/sys/class/net"])
        assert links.stdout.split() == ["lo"], links  # no network but its own loopback
        socket_dir = await sandbox.commands.run(["ls", docker_runtime.SOCKET_DIR])
        assert socket_dir.exit_code != 0, socket_dir
        assert "Permission denied" in socket_dir.stderr, socket_dir


async def test_the_token_is_in_no_argv_environment_label_or_inspect(
    sessions: LocalSessions, daemon: DockerDaemon, request: pytest.FixtureRequest
) -> None:
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        _, token = sessions.route(sandbox.id)
        (container,) = _session_containers(daemon)
        inspected = daemon.docker("inspect", container)
        assert inspected.returncode == 0, inspected.stderr
        assert token.reveal() not in inspected.stdout
        (doc,) = json.loads(inspected.stdout)
        host = doc["HostConfig"]
        assert (host["ReadonlyRootfs"], host["NetworkMode"], host.get("CapAdd") or []) == (True, "none", [])
        # Podman lists the capabilities it dropped (the first test finds none left in the container).
        assert host["CapDrop"] == ["ALL"] or {"SETUID", "CHOWN", "NET_RAW"} <= set(host["CapDrop"])
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert min(host["PidsLimit"], host["Memory"], host["NanoCpus"] or host["CpuShares"]) > 0
        assert (doc["Config"]["User"], host["PortBindings"] or {}, doc["Config"].get("ExposedPorts")) == (
            "10001:10001",
            {},
            None,
        )
        assert doc["Config"]["Labels"][labels.LABEL_MANAGED_BY] == labels.MANAGED_BY_VALUE
        top = daemon.docker("top", container, "-o", "pid,args")
        assert "server.py" in top.stdout or on_podman(request), top.stderr  # Podman's API takes no ps options
        assert token.reveal() not in top.stdout
        env = await sandbox.commands.run(["sh", "-c", "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"])
        assert token.reveal() not in env.stdout


async def test_files_move_in_and_out(sessions: LocalSessions, tmp_path: Path) -> None:
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        assert await sandbox.files.write("d/f.txt", "hello") == 5
        assert await sandbox.files.read("d/f.txt") == b"hello"
        assert [(e.name, e.type) for e in await sandbox.files.list("d")] == [("f.txt", "file")]
        owner = await sandbox.commands.run(["stat", "-c", "%u", "d/f.txt"])
        assert owner.stdout == "10001\n"
        with pytest.raises(PermissionError):
            await sandbox.files.read("/etc/passwd")


async def test_a_workspace_is_the_working_directory_and_its_changes_come_back(
    sessions: LocalSessions, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "kept.txt").write_text("one\n")
    async with await sessions.open(OpenOptions(ttl=120, workspace=Workspace(str(repo)))) as sandbox:
        done = await sandbox.commands.run(["sh", "-c", "pwd; echo two >> kept.txt; echo new > added.txt"])
        assert (done.exit_code, done.stdout) == (0, "/workspace\n"), done
        found = await sessions.changes(sandbox.id)
        assert sorted(found.changed_paths) == ["added.txt", "kept.txt"]
        assert (repo / "kept.txt").read_text() == "one\n"
        await sessions.changes(sandbox.id, apply=True)
        assert (repo / "kept.txt").read_text() == "one\ntwo\n"


async def test_close_and_the_ttl_leave_no_container(sessions: LocalSessions, daemon: DockerDaemon, state: Path) -> None:
    one = await sessions.open(OpenOptions(ttl=120))
    await one.commands.start(["sleep", "300"])
    short = await sessions.open(OpenOptions(ttl=2))
    assert len(_session_containers(daemon)) == 2
    await one.close()
    await eventually(lambda: sessions.held() == [], interval_s=0.2, what="the TTL to end the other session")
    assert _session_containers(daemon) == []
    assert os.listdir(state) == []
    for handle in (one, short):
        await handle.disconnect()


_OWNER = """
import asyncio, sys
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.sessions import OpenOptions, PoolPolicy
from ironflow.sessions.client import RuntimeClient

async def main():
    sessions = LocalSandboxProvider(isolation="docker").sessions(state_dir=sys.argv[1])
    sandbox = await sessions.open(OpenOptions(ttl=600))
    print(sandbox.id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_sigkilled_owners_container_goes_at_the_next_start(docker_daemon: DockerDaemon, state: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(state)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.startswith("sbx-"), line
        assert len(_session_containers(docker_daemon)) == 1
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    assert len(_session_containers(docker_daemon)) == 1  # the daemon holds it: its owner's death is not its end
    LocalSandboxProvider(isolation="docker").sessions(state_dir=str(state))  # its start sweeps
    assert _session_containers(docker_daemon) == []
    assert os.listdir(state) == []


def _tar(*members: tuple[str, bytes | str]) -> bytes:
    """A tar of regular files (bytes) and symlinks (str: the target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


async def test_a_tar_in_without_the_images_extraction_filter_stays_in_the_workspace(sessions: LocalSessions) -> None:
    """The runner image's Python (Debian 12's 3.11.2) has no tar filter: the runtime takes plain
    files and directories only, each inside the workspace once resolved."""
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        socket_path, token = sessions.route(sandbox.id)
        client = RuntimeClient(unix_path=socket_path, headers={"Authorization": f"Bearer {token.reveal()}"})
        try:
            put = functools.partial(client.json, "PUT", "/ironflow/v1/tar/in")
            assert (await put(data=_tar(("a/b.txt", b"kept"))))["entries"] == 1
            assert await sandbox.files.read("in/a/b.txt") == b"kept"
            await sandbox.commands.run(["ln", "-s", "/tmp", "in/out"])
            for hostile in (_tar(("../../escape", b"x")), _tar(("out/escape", b"x"))):
                with pytest.raises(PermissionError):
                    await put(data=hostile)
            with pytest.raises(errors.ConfigError, match="a link or special file"):
                await put(data=_tar(("link", "/etc/passwd")))
            left = await sandbox.commands.run(["sh", "-c", "ls /tmp /home; test ! -e in/link"])
            assert (left.exit_code, "escape" in left.stdout) == (0, False), left
        finally:
            await client.aclose()


def test_sandbox_serve_isolation_docker_opens_execs_and_closes(docker_daemon: DockerDaemon) -> None:
    served = serving.start_serve(serving.cli_env(IRONFLOW_SANDBOX_TOKEN=serving.TOKEN), "--isolation", "docker")
    try:
        opened = serving.ironflow("sandbox", "open", "--ttl", "5m", env=served.env)
        assert opened.returncode == 0, opened.stderr
        sandbox_id = opened.stdout.strip()
        done = serving.ironflow("sandbox", "exec", sandbox_id, "--", "id", "-u", env=served.env)
        assert (done.returncode, done.stdout) == (0, "10001\n"), done.stderr
        assert len(_session_containers(docker_daemon)) == 1
        closed = serving.ironflow("sandbox", "close", sandbox_id, env=served.env)
        assert closed.returncode == 0, closed.stderr
        assert _session_containers(docker_daemon) == []
    finally:
        assert served.stop() == 0
        for stream in (served.proc.stdout, served.proc.stderr):
            if stream is not None:
                stream.close()


async def test_a_pool_hands_out_warm_containers_each_once(docker_daemon: DockerDaemon, state: Path) -> None:
    """A warm container waits with no token (its socket not bound yet); handed out, it gets the
    session's env and its socket directory is taken back; the next session gets a fresh one."""
    provider = LocalSandboxProvider(isolation="docker", timeout=60)
    async with provider.sessions(state_dir=str(state), pool=PoolPolicy(1)) as sessions:
        assert sessions.pool is not None
        await asyncio.wait_for(sessions.pool.full(), 60)
        (warm,) = sessions.pool.waiting()
        assert os.listdir(f"{warm.directory}/{docker_runtime.SOCKET_SUBDIR}") == []  # no socket, no token yet
        first = await sessions.open(OpenOptions(ttl=60, env={"GREETING": "hello"}))
        assert sessions.route(first.id)[0] == docker_runtime.host_socket(warm.directory)
        wrote = await first.commands.run(["sh", "-c", "echo $GREETING > note; cat note; ls /ironflow-session"])
        assert (wrote.stdout, "Permission denied" in wrote.stderr) == ("hello\n", True), wrote
        await first.close()
        await asyncio.wait_for(sessions.pool.full(), 60)
        second = await sessions.open(OpenOptions(ttl=60))
        assert (await second.commands.run(["cat", "note"])).exit_code != 0
        await second.close()
    assert _session_containers(docker_daemon) == []
    assert os.listdir(state) == []


async def test_snapshot_fork_and_pause_are_refused_in_one_line(sessions: LocalSessions) -> None:
    """A Docker session's processes are the daemon's: nothing here could freeze or read them."""
    with pytest.raises(errors.ConfigError, match="not Docker's"):
        await sessions.open(OpenOptions(ttl=60, idle_suspend=30))
    async with await sessions.open(OpenOptions(ttl=120)) as sandbox:
        for control in (sessions.pause, sessions.snapshot, sessions.fork):
            with pytest.raises(errors.ConfigError, match="a Docker session's processes are the daemon's"):
                await control(sandbox.id)
        assert (await sandbox.commands.run(["true"])).exit_code == 0  # untouched by the refusals
