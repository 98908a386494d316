"""Local sessions under real gVisor (runsc), what only they have: the sandbox is gVisor's with no
network, the runtime's socket and code out of the step's reach, one session blind to another and
to the router's port, a 2 GB upload refused at the limit without filling memory, and nothing left
(no runsc process, no state dir) once the supervisor is SIGKILLed. The contract every backend
keeps runs on gVisor in ``test_session_contract.py``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sessions.integration.serving import TOKEN as SERVE_TOKEN
from tests.sessions.integration.serving import cli_env, ironflow, start_serve

from ironflow import errors
from ironflow.local import LocalSandboxProvider
from ironflow.local.sessions import gvisor_runtime
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sandbox_router.process import serve
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions
from ironflow.sessions.remote import RemoteSessions
from ironflow.testing.processes import argv_of, descendants, running

pytestmark = [
    pytest.mark.gvisor,
    pytest.mark.skipif(shutil.which("runsc") is None, reason="runsc (gVisor) not installed"),
]

ROOT = Path(__file__).resolve().parents[3]
TOKEN = Secret("gvisor-router-token-0123456789abcdef")


@pytest.fixture
async def sessions(state: Path) -> AsyncIterator[LocalSessions]:
    async with LocalSessions(LocalSandboxProvider(isolation="gvisor"), state_dir=str(state)) as opened:
        yield opened


def _peak_rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def _runsc_of(state: Path) -> list[int]:
    """Host processes of runsc (run, sandbox, gofer) whose command line names a dir under ``state``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and "runsc" in (line := " ".join(argv_of(int(entry.name)))) and str(state) in line:
            found.append(int(entry.name))
    return found


_PY = "python3 -I -S -c"


async def test_the_sandbox_is_gvisor_and_its_runtime_out_of_reach(sessions: LocalSessions) -> None:
    """gVisor's kernel, no network, uid 10001; the token in no environ or cmdline nor readable in
    the runtime's memory; its socket directory, which holds its code, closed to the step; nothing
    new on the host's ``/``."""
    host_root = sorted(os.listdir("/"))
    async with await sessions.open(OpenOptions(ttl=60)) as sandbox:
        assert any("runsc-sandbox" in " ".join(argv_of(pid)) for pid in sessions.host_pids(sandbox.id))
        assert "gVisor" in (await sandbox.commands.run(["dmesg"])).stdout
        assert (await sandbox.commands.run(["id", "-u"])).stdout == "10001\n"
        links = await sandbox.commands.run(["cat", "/proc/net/dev"])
        assert [line.split(":")[0].strip() for line in links.stdout.splitlines()[2:]] == ["lo"]
        _, token = sessions.route(sandbox.id)
        env = await sandbox.commands.run(
            ["sh", "-c", "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'"]
        )
        assert "--token-fd" in env.stdout  # the runtime's own cmdline was read
        assert token.reveal() not in env.stdout
        probe = (
            "import os\n"
            f"for p in ({gvisor_runtime.SOCKET_DIR!r}, {gvisor_runtime.PACKED_PATH!r}, '/dev/ironflow-runtime'):\n"
            "    try:\n"
            "        os.listdir(p) if not p.endswith('.packed') else open(p, 'rb')\n"
            "        print(p, 'open')\n"
            "    except OSError as exc:\n"
            "        print(p, type(exc).__name__)\n"
        )
        refused = await sandbox.commands.run(["python3", "-I", "-S", "-c", probe])
        assert refused.stdout.split("\n")[:3] == [
            f"{gvisor_runtime.SOCKET_DIR} PermissionError",
            f"{gvisor_runtime.PACKED_PATH} PermissionError",  # the runtime's code: neither read nor replaced
            "/dev/ironflow-runtime FileNotFoundError",  # no directory of code is bound in
        ], refused
        runtime_mem = await sandbox.commands.run(["python3", "-I", "-S", "-c", "open('/proc/1/mem', 'rb')"])
        assert "PermissionError" in runtime_mem.stderr, runtime_mem  # pid 1 is the runtime: its memory holds the token
    assert sorted(os.listdir("/")) == host_root


#: Every process of the session, with any capability it holds in any set (none should).
_CAPABILITIES = r"""
import os
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
    held = [k for k in ("CapInh", "CapPrm", "CapEff", "CapBnd") if int(status[k].strip(), 16)]
    print(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode(), held)
"""


async def test_no_process_of_a_session_keeps_a_capability_its_bounding_set_included(
    sessions: LocalSessions,
) -> None:
    """The runtime starts as gVisor's root to bind its socket, then sets its uids apart: nothing is
    left to it or its commands, not even a bounding set an exec could draw on (it kept CAP_SETUID
    and CAP_SETGID there when a Python of its own bound the socket)."""
    async with await sessions.open(OpenOptions(ttl=60)) as sandbox:
        done = await sandbox.commands.run(["python3", "-I", "-S", "-c", _CAPABILITIES], timeout=30)
    assert done.exit_code == 0, done
    processes = [line.rsplit(" ", 1) for line in done.stdout.splitlines()]
    assert len(processes) >= 2, done.stdout  # the runtime and this command
    assert all(held == "[]" for _, held in processes), done.stdout


async def test_one_session_sees_nothing_of_another_nor_the_routers_port(state: Path) -> None:
    """Two sessions through a real router: B finds none of A's files or processes, and neither
    A's socket nor the router's port (no network at all: not even with the token)."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    local = LocalSessions(LocalSandboxProvider(isolation="gvisor"), state_dir=str(state))
    server = asyncio.create_task(serve("127.0.0.1", 0, TOKEN, ready=ready.set_result, sessions=local))
    try:
        url = await ready
        port = int(url.rsplit(":", 1)[1])
        async with RemoteSessions(url, token=TOKEN) as remote:
            a = await remote.open(OpenOptions(ttl=60))
            b = await remote.open(OpenOptions(ttl=60))
            await a.files.write("secret-of-a.txt", "only a")
            await a.commands.start(["sh", "-c", "exec sleep 300.0431"])
            a_socket, _ = local.route(a.id)
            probe = (
                "import os, socket\n"
                "walked = [w for r in ('/home', '/tmp', '/dev') for w in os.walk(r)]\n"
                "found = [os.path.join(d, f) for d, _, fs in walked for f in fs]\n"
                "print('files', [f for f in found if 'secret-of-a' in f])\n"
                "procs = [open(f'/proc/{p}/cmdline', 'rb').read() for p in os.listdir('/proc') if p.isdigit()]\n"
                "print('procs', [p for p in procs if b'300.' + b'0431' in p])\n"  # not the probe's own line
                f"for where in ({a_socket!r}, ('127.0.0.1', {port})):\n"
                "    s = socket.socket(socket.AF_UNIX if isinstance(where, str) else socket.AF_INET)\n"
                "    s.settimeout(2)\n"
                "    try:\n"
                "        s.connect(where)\n"
                "        print('reached', where)\n"
                "    except OSError as exc:\n"
                "        print('refused', type(exc).__name__)\n"
            )
            seen = await b.commands.run(["python3", "-I", "-S", "-c", probe])
            assert seen.stdout.splitlines() == [
                "files []",
                "procs []",
                "refused FileNotFoundError",
                "refused ConnectionRefusedError",
            ], seen
            mine = await a.commands.run(["sh", "-c", "cat secret-of-a.txt; ps -eo args | grep -c '^sleep 300.0431$'"])
            assert mine.stdout == "only a1\n"  # the probe would have found them had they been in reach
            for handle in (a, b):
                await handle.close()
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)


class _Zeros:
    """A binary file of ``size`` zero bytes that holds none of them; counts what was read."""

    def __init__(self, size: int) -> None:
        self.left, self.read_bytes = size, 0

    def read(self, n: int = -1) -> bytes:
        n = min(self.left, 1 << 20 if n < 0 else n)
        self.left -= n
        self.read_bytes += n
        return bytes(n)


async def test_a_2gb_upload_is_refused_at_the_limit_without_filling_memory(state: Path) -> None:
    limit = 64 << 20
    provider = LocalSandboxProvider(isolation="gvisor")
    async with (
        LocalSessions(provider, state_dir=str(state), max_upload_bytes=limit) as local,
        await local.open(OpenOptions(ttl=120)) as sandbox,
    ):
        body = _Zeros(2 << 30)
        with pytest.raises(errors.ConfigError, match=r"(?i)too large|limit"):
            await sandbox.files.write("huge.bin", body)  # type: ignore[arg-type]
        assert body.read_bytes < limit + (64 << 20), f"{body.read_bytes} bytes sent: not stopped at the limit"
        peak_kib = sum(_peak_rss_kib(pid) for pid in local.host_pids(sandbox.id))
        assert peak_kib < 768 << 10, f"the session's processes peaked at {peak_kib} KiB"
        assert (await sandbox.commands.run("true")).exit_code == 0  # the session lives on


_SUPERVISOR = """
import asyncio, json, sys
from ironflow import egress
from ironflow.local import LocalSandboxProvider
from ironflow.sessions import OpenOptions
async def main():
    sessions = LocalSandboxProvider(isolation="gvisor").sessions(state_dir=sys.argv[1])
    policy = egress.EgressPolicy(allow=tuple(egress.parse_allow_host(rule) for rule in sys.argv[2:]))
    sandbox = await sessions.open(OpenOptions(ttl=600, egress=policy))
    await sandbox.commands.start(["sh", "-c", "sleep 600 & sleep 600"])
    await asyncio.sleep(0.3)
    print(json.dumps({"id": sandbox.id, "pids": sessions.host_pids(sandbox.id)}), flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


@pytest.mark.parametrize("allow", [(), ("127.0.0.2:9",)], ids=["plain", "egress"])
def test_sigkill_of_the_supervisor_leaves_no_runsc_process_and_the_state_is_swept(
    state: Path, allow: tuple[str, ...]
) -> None:
    """With an egress policy too: ``runsc run`` is then the relay's child, not bubblewrap's, and dies with it."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    supervisor = [sys.executable, "-c", _SUPERVISOR, str(state), *allow]
    # stdin /dev/null, as a server's: nothing but the kill chain may end the sandbox (an inherited one can).
    proc = subprocess.Popen(supervisor, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        doc = json.loads(proc.stdout.readline())
        runsc = _runsc_of(state)
        lines = [" ".join(argv_of(pid)) for pid in runsc]
        for kind in ("runsc-sandbox", "runsc-gofer", " run --bundle "):  # the sandbox, the gofer, runsc run
            assert any(kind in line for line in lines), (kind, lines)
        assert set(runsc) <= set(doc["pids"]), "every runsc process is in the session's cgroup"
        assert len(list(state.iterdir())) == 1
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    deadline = time.monotonic() + 10
    while (_runsc_of(state) or any(map(running, doc["pids"]))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _runsc_of(state) == []
    assert not any(map(running, doc["pids"]))
    (left,) = state.iterdir()
    assert list((left / "gvisor" / "state").iterdir()), "runsc's state was there to sweep"
    LocalSessions(LocalSandboxProvider(isolation="gvisor"), state_dir=str(state))  # the next one sweeps
    assert list(state.iterdir()) == []


def test_serve_isolation_gvisor_serves_gvisor_sessions_and_a_bad_value_is_one_line() -> None:
    server = start_serve(cli_env(IRONFLOW_SANDBOX_TOKEN=SERVE_TOKEN), "--isolation", "gvisor")
    try:
        doc = json.loads(ironflow("sandbox", "open", "-o", "json", env=server.env).stdout)
        assert doc["isolation"] == "gvisor"
        done = ironflow("sandbox", "exec", doc["id"], "--", "sh", "-c", "dmesg | grep -c gVisor", env=server.env)
        assert done.returncode == 0, done
        assert int(done.stdout) > 0, done
        pids = descendants(server.proc.pid)
        assert any("runsc-sandbox" in " ".join(argv_of(pid)) for pid in pids)
    finally:
        assert server.stop() == 0  # SIGTERM closes every session
        server.proc.communicate()
    assert not any(running(pid) for pid in pids), "no process of any session outlives the server"
    env = cli_env(IRONFLOW_SANDBOX_TOKEN=SERVE_TOKEN)
    for args, text in (
        (["--isolation", "kvm"], "error: invalid value for '--isolation': 'kvm' is not one of 'bwrap', 'gvisor'"),
        (["--isolation", "gvisor", "--backend", "k8s"], "error: --isolation is for --backend local"),
    ):
        done = ironflow("sandbox", "serve", "--port", "0", *args, env=env)
        assert done.returncode == 2, done
        assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
        assert done.stderr.startswith(text), done.stderr
