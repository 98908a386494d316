"""The runtime as a pod's main process, on this host: it listens on TCP before it has a token,
answers only the token-less probe (200, saying nothing) and 503 to the rest, then takes each
holder's token through its FIFO as the real delivery script writes it (``runtime_pod``); 401 for
any other bearer; the first line sets the workspace and the idle timeout, a later one neither."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from ironflow.k8s.sessions import runtime_pod
from ironflow.sandbox_runtime import SERVER_PATH, SESSION_ENV
from ironflow.testing.polling import eventually


@dataclass
class Pod:
    url: str
    home: Path
    fifo: Path
    proc: subprocess.Popen[bytes]

    def deliver(self, token: str, *, workspace: str | None = None, idle: float | None = None) -> bool | None:
        """The delivery script as ``pods/exec`` runs it in a pod, at this runtime's FIFO and file."""
        line = runtime_pod.token_line(token, workspace=workspace, idle_timeout=idle, max_upload_bytes=1000)
        argv = list(runtime_pod.delivery_command(len(line), python=sys.executable))
        argv[5:7] = [str(self.fifo), SERVER_PATH]
        done = subprocess.run(argv, input=line, capture_output=True, timeout=30, check=True, cwd=self.home)
        return runtime_pod.delivered(done.stdout)


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Pod]:
    with _started(tmp_path, {}) as started:
        yield started


@contextlib.contextmanager
def _started(tmp_path: Path, env: dict[str, str]) -> Iterator[Pod]:
    """The runtime as a pod runs it, its manifest's ``env`` added to a bare PATH."""
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    fifo = home / ".ironflow" / "runtime-tokens"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    argv = [sys.executable, "-I", "-S", SERVER_PATH, "--listen-fd", str(listener.fileno()), "--token-fifo", str(fifo)]
    proc = subprocess.Popen(
        argv, cwd=home, stderr=subprocess.PIPE, pass_fds=[listener.fileno()], env={"PATH": "/usr/bin:/bin", **env}
    )
    listener.close()
    assert proc.stderr is not None
    try:  # killed even when it never says ready
        assert proc.stderr.readline().startswith(b"ironflow-runtime: ready")
        yield Pod(f"http://127.0.0.1:{port}", home, fifo, proc)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _taken(http: aiohttp.ClientSession, pod: Pod, token: str) -> None:
    """Until the runtime read the token (its own thread reads the FIFO: 503 until then)."""

    async def admitted() -> bool:
        return await _status(http, "GET", pod.url + "/exists/.", _auth(token)) != 503

    await eventually(admitted, limit_s=10, interval_s=0.02, what=f"{token} read from the FIFO")


async def _status(http: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str]) -> int:
    async with http.request(method, url, headers=headers, json={"command": "touch pwned"}) as r:
        return r.status


async def test_before_its_token_only_the_probe_is_answered_and_it_says_nothing(
    pod: Pod, http: aiohttp.ClientSession
) -> None:
    async with http.get(pod.url + "/") as r:
        assert (r.status, await r.json()) == (200, {"status": "ok"})
    for method, path in (("GET", "/"), ("POST", "/execute"), ("GET", "/list/."), ("POST", "/ironflow/v1/commands")):
        for headers in ({}, _auth("guess")):
            if (method, path, headers) != ("GET", "/", {}):
                assert await _status(http, method, pod.url + path, headers) == 503
    assert not (pod.home / "pwned").exists()
    mode = pod.fifo.stat().st_mode
    assert stat.S_ISFIFO(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(pod.fifo.parent.stat().st_mode) == 0o700


async def test_each_holders_delivered_token_is_admitted_and_nothing_else(pod: Pod, http: aiohttp.ClientSession) -> None:
    assert pod.deliver("first-holder-token", workspace=str(pod.home / "workspace")) is True
    assert pod.deliver("second-holder-token", workspace=str(pod.home)) is True  # a reattach: its workspace ignored
    for token in ("first-holder-token", "second-holder-token"):
        await _taken(http, pod, token)
        async with http.post(pod.url + "/execute", json={"command": "pwd"}, headers=_auth(token)) as r:
            assert r.status == 200
            assert (await r.json())["stdout"] == f"{pod.home / 'workspace'}\n"  # the first line's workspace
    for headers in ({}, _auth("guess"), _auth("first-holder-token2"), {"Authorization": "first-holder-token"}):
        assert await _status(http, "POST", pod.url + "/execute", headers) == 401
        assert await _status(http, "GET", pod.url + "/exists/x", headers) == 401
    async with http.get(pod.url + "/") as r:  # the probe stays the one answer without a token
        assert (r.status, await r.json()) == (200, {"status": "ok"})
    assert not (pod.home / "workspace" / "pwned").exists()
    # the first line's upload limit holds
    async with http.put(pod.url + "/ironflow/v1/files/big", data=b"x" * 5000, headers=_auth("first-holder-token")) as r:
        assert r.status == 413


async def test_a_bad_line_is_dropped_and_the_runtime_goes_on(pod: Pod, http: aiohttp.ClientSession) -> None:
    pod.fifo.write_bytes(b"not json at all\n")  # the runtime holds the FIFO open: never blocks
    assert pod.deliver("good-token") is True
    await _taken(http, pod, "good-token")
    assert await _status(http, "GET", pod.url + "/exists/a", _auth("good-token")) == 200
    assert pod.proc.stderr is not None
    assert pod.proc.stderr.readline() == b"ironflow-runtime: a bad token line: JSONDecodeError\n"


def test_a_pod_without_the_runtime_says_absent_at_once(tmp_path: Path) -> None:
    line = runtime_pod.token_line("t", workspace=None, idle_timeout=None, max_upload_bytes=1)
    argv = list(runtime_pod.delivery_command(len(line), python=sys.executable))
    argv[5:7] = [str(tmp_path / "no-fifo"), str(tmp_path / "no-server.py")]
    started = time.monotonic()
    done = subprocess.run(argv, input=line, capture_output=True, timeout=30, check=True)
    assert runtime_pod.delivered(done.stdout) is False
    assert time.monotonic() - started < 10
    assert b'"t"' not in done.stdout + done.stderr


async def test_the_first_lines_idle_timeout_ends_the_runtime_whatever_probes_it(
    pod: Pod, http: aiohttp.ClientSession
) -> None:
    """The kubelet's probe (every 2 s) and refused requests keep no session alive."""
    assert pod.deliver("idle-token", idle=1.5) is True
    await _taken(http, pod, "idle-token")
    started = time.monotonic()
    with contextlib.suppress(aiohttp.ClientError):
        while pod.proc.poll() is None and time.monotonic() - started < 20:
            assert await _status(http, "GET", pod.url + "/", {}) == 200
            await _status(http, "GET", pod.url + "/exists/x", _auth("guess"))
            await asyncio.sleep(0.2)
    assert pod.proc.wait(timeout=5) == 0
    assert time.monotonic() - started < 15


async def test_the_delivered_variables_reach_each_command_started_after_they_are_written(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    """The pod's manifest names the file only; its variables (a session's proxy with its token)
    reach the commands started once it is written, under each command's own ``env``."""
    env_file = tmp_path / "home" / ".ironflow" / "session-env"
    with _started(tmp_path, {SESSION_ENV: str(env_file)}) as started:
        assert started.deliver("holder") is True
        await _taken(http, started, "holder")

        async def shown(extra: dict[str, str] | None = None) -> str:
            body = {"argv": ["sh", "-c", 'echo "${HTTPS_PROXY:-none}"'], "env": extra or {}}
            async with http.post(started.url + "/ironflow/v1/commands", json=body, headers=_auth("holder")) as r:
                events = [json.loads(line) async for line in r.content if line.strip()]
            return "".join(e.get("stdout", "") for e in events)

        assert await shown() == "none\n"  # before the write: no proxy, nothing reached
        env_file.write_text(json.dumps({"HTTPS_PROXY": "http://ironflow:ifap_x@proxy:3128"}))
        assert await shown() == "http://ironflow:ifap_x@proxy:3128\n"
        assert await shown({"HTTPS_PROXY": "mine"}) == "mine\n"  # a command's own env wins
        env_file.write_text("not json")
        assert await shown() == "none\n"  # unreadable: none, the runtime goes on


def test_the_runtime_and_ironflow_name_the_same_variable() -> None:
    assert f'\nSESSION_ENV = "{SESSION_ENV}"\n' in Path(SERVER_PATH).read_text()


#: The runtime as a pod runs it (``--port``), with an audit hook that, when the runtime opens its
#: FIFO (from then on a delivery succeeds: it finds a reader), connects to the socket it bound.
_AT_FIFO_OPEN = """
import _socket, os, sys
fifo, server = sys.argv[1], sys.argv[2]
bound, said = [], []

def hook(event, args):
    if event == "socket.bind":
        bound.append(args[0])
    elif event == "open" and args[0] == fifo and not said:
        said.append(True)
        found = "nothing bound"
        if bound:
            probe = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            try:
                probe.connect(bound[-1].getsockname())
                found = "listening"
            except OSError as exc:
                found = type(exc).__name__
            finally:
                probe.close()
        os.write(2, ("at the fifo's open: " + found + "\\n").encode())

sys.addaudithook(hook)
sys.path.insert(0, os.path.dirname(server))
sys.argv = [server, "--host", "127.0.0.1", "--port", "0", "--token-fifo", fifo]
exec(compile(open(server).read(), server, "exec"), {"__name__": "__main__", "__file__": server})
"""


def test_a_delivered_token_finds_the_runtime_listening(tmp_path: Path) -> None:
    """A holder connects as soon as its delivery returns: the FIFO takes a token only once the socket listens."""
    fifo = tmp_path / ".ironflow" / "runtime-tokens"
    argv = [sys.executable, "-I", "-S", "-c", _AT_FIFO_OPEN, str(fifo), SERVER_PATH]
    proc = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"})
    assert proc.stderr is not None
    try:
        said = [proc.stderr.readline() for _ in range(2)]
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert said == [b"at the fifo's open: listening\n", b"ironflow-runtime: ready\n"]
