"""The runtime server on the host, as a sandbox runs it: the legacy API as upstream speaks it,
the token, confinement, the upload limit and the extension's streams."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from ironflow.sandbox_runtime import SERVER_PATH

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sock = str(tmp_path / "rt.sock")
    argv = [sys.executable, "-I", "-S", SERVER_PATH, "--unix", sock, "--workspace", str(workspace)]
    argv += ["--max-upload-bytes", "100000", "--max-output-bytes", "1000"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"})
    assert proc.stdin is not None
    assert proc.stderr is not None
    try:  # killed even when it never says ready
        proc.stdin.write(TOKEN.encode() + b"\n")
        proc.stdin.close()
        assert proc.stderr.readline().startswith(b"ironflow-runtime: ready")
        yield sock, workspace, proc
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


@pytest.fixture
async def http(runtime: tuple[str, Path, subprocess.Popen[bytes]]) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=runtime[0]), headers=AUTH) as session:
        yield session


async def test_every_request_needs_the_token(runtime: tuple[str, Path, subprocess.Popen[bytes]]) -> None:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=runtime[0])) as anon:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            async with anon.get("http://rt/", headers=headers) as r:
                assert r.status == 401
            async with anon.post("http://rt/execute", json={"command": "touch pwned"}, headers=headers) as r:
                assert r.status == 401
    assert not (runtime[1] / "pwned").exists()


async def test_health_and_execute_as_upstream(http: aiohttp.ClientSession) -> None:
    async with http.get("http://rt/") as r:
        assert await r.json() == {"status": "ok", "message": "Sandbox Runtime is active."}
    async with http.post("http://rt/execute", json={"command": "sh -c 'echo out; echo err >&2; exit 3'"}) as r:
        assert r.status == 200
        assert await r.json() == {"stdout": "out\n", "stderr": "err\n", "exit_code": 3, "timed_out": False}
    async with http.post("http://rt/execute", json={"command": "echo $HOME; pwd"}) as r:
        doc = await r.json()
    assert doc["stdout"].startswith("$HOME; pwd"), "no shell: the words are echo's arguments"
    async with http.post("http://rt/execute", json={"command": "no-such-command-here"}) as r:
        doc = await r.json()
    assert r.status == 200
    assert doc["exit_code"] == 127
    assert "No such file" in doc["stderr"]


async def test_a_timeout_kills_the_whole_process_group(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    marker = tmp_path / "ws" / "late"
    command = "sh -c 'sleep 3 & sleep 3; echo x'"
    async with http.post("http://rt/execute", json={"command": command, "timeout_seconds": 0.3}) as r:
        doc = await r.json()
    assert doc["timed_out"] is True
    assert doc["exit_code"] != 0
    async with http.post(
        "http://rt/execute", json={"command": f"sh -c 'sleep 1; touch {marker}'", "timeout_seconds": 0.2}
    ):
        pass
    await asyncio.sleep(1.5)
    assert not marker.exists()


async def test_the_commands_never_see_the_token(
    http: aiohttp.ClientSession, runtime: tuple[str, Path, subprocess.Popen[bytes]]
) -> None:
    async with http.post("http://rt/execute", json={"command": "env"}) as r:
        doc = await r.json()
    assert TOKEN not in doc["stdout"]
    assert TOKEN.encode() not in _proc_file(runtime[2].pid, "cmdline")
    assert TOKEN.encode() not in _proc_file(runtime[2].pid, "environ")


async def test_files_go_in_and_out_and_stay_in_the_workspace(http: aiohttp.ClientSession, tmp_path: Path) -> None:
    form = aiohttp.FormData(quote_fields=False)
    form.add_field("file", b"hello", filename="a/b/c.txt")
    async with http.post("http://rt/upload", data=form) as r:
        assert r.status == 200
        assert "uploaded" in (await r.json())["message"]
    async with http.get("http://rt/download/a%2Fb%2Fc.txt") as r:
        assert r.headers["Content-Type"] == "application/octet-stream"
        assert await r.read() == b"hello"
    async with http.get("http://rt/list/a%2Fb") as r:
        [entry] = await r.json()
    assert entry["name"] == "c.txt"
    assert entry["size"] == 5
    assert entry["type"] == "file"
    assert isinstance(entry["mod_time"], float)
    async with http.get("http://rt/exists/a%2Fb%2Fc.txt") as r:
        assert await r.json() == {"path": "a/b/c.txt", "exists": True}
    async with http.get("http://rt/download/missing") as r:
        assert r.status == 404
        assert await r.json() == {"message": "File not found"}
    async with http.get("http://rt/list/a%2Fb%2Fc.txt") as r:
        assert r.status == 404
    os.symlink("/etc", tmp_path / "ws" / "out")
    for path in ("..%2Fsecret", "%2Fetc%2Fpasswd", "out%2Fpasswd", "a%2F..%2F..%2Fx"):
        for verb in ("download", "list", "exists"):
            async with http.get(f"http://rt/{verb}/{path}") as r:
                assert r.status == 403, (verb, path)
                assert await r.json() == {"message": "Access denied"}
    for name in ("../escape.txt", "/etc/escape.txt", "out/escape.txt"):
        form = aiohttp.FormData(quote_fields=False)
        form.add_field("file", b"x", filename=name)
        async with http.post("http://rt/upload", data=form) as r:
            assert r.status == 403, name
    assert not (tmp_path / "escape.txt").exists()


async def test_an_upload_past_the_limit_is_refused_without_reading_it(
    runtime: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    reader, writer = await asyncio.open_unix_connection(runtime[0])
    head = (
        "POST /upload HTTP/1.1\r\nHost: rt\r\nAuthorization: Bearer " + TOKEN + "\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 2147483648\r\n\r\n"
    )
    writer.write(head.encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 413")
    status = _proc_file(runtime[2].pid, "status").decode().splitlines()
    rss_kb = int(next(line for line in status if line.startswith("VmRSS")).split()[1])
    assert rss_kb < 100_000


async def test_a_chunked_upload_stops_at_the_limit_and_leaves_no_file(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    async def body() -> AsyncIterator[bytes]:
        for _ in range(40):
            yield b"x" * 10_000

    form = aiohttp.FormData(quote_fields=False)
    form.add_field("file", body(), filename="big.bin")
    try:
        async with http.post("http://rt/upload", data=form) as r:
            status = r.status
    except aiohttp.ClientError:
        status = 413  # the runtime answered and closed while the body was still coming
    assert status == 413
    assert list((tmp_path / "ws").iterdir()) == []


async def test_the_extension_streams_events_and_bounds_the_output(http: aiohttp.ClientSession) -> None:
    spec = {"argv": ["sh", "-c", "read x; echo got $x; echo $GREETING >&2; pwd"], "env": {"GREETING": "hi"}}
    spec |= {"stdin": "d29ybGQK", "cwd": "."}  # "world\n"
    async with http.post("http://rt/ironflow/v1/commands", json=spec) as r:
        events = [json.loads(line) async for line in r.content if line.strip()]
    assert events[-1] == {"exit_code": 0, "timed_out": False}
    assert "".join(e.get("stdout", "") for e in events[1:]).startswith("got world\n")
    assert {"stderr": "hi\n"} in events
    async with http.post("http://rt/ironflow/v1/commands", json={"argv": ["head", "-c", "5000", "/dev/zero"]}) as r:
        events = [json.loads(line) async for line in r.content if line.strip()]
    out = "".join(e.get("stdout", "") for e in events)
    assert out.count("\0") == 1000
    assert "truncated at 1000 bytes" in out


async def test_a_background_command_is_waited_for_or_killed(http: aiohttp.ClientSession) -> None:
    async with http.post("http://rt/ironflow/v1/commands", json={"argv": ["sleep", "30"], "background": True}) as r:
        cid = (await r.json())["id"]
    async with http.post(f"http://rt/ironflow/v1/commands/{cid}/kill") as r:
        assert await r.json() == {"killed": True}
    async with http.get(f"http://rt/ironflow/v1/commands/{cid}") as r:
        events = [json.loads(line) async for line in r.content if line.strip()]
    assert events[-1]["exit_code"] == 137


@pytest.fixture
def handed_out(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A runtime started ``--prewarm``, checked to wait with no socket, then handed out with an env."""
    sock = tmp_path / "rt.sock"
    argv = [sys.executable, "-I", "-S", SERVER_PATH, "--unix", str(sock), "--workspace", str(tmp_path), "--prewarm"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"})
    assert proc.stdin is not None
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline() == b"ironflow-runtime: warm\n"
        assert not sock.exists(), "nothing answers before the hand-out"
        line = {"token": TOKEN, "env": {"GREETING": "hello"}, "idle_timeout": None}
        proc.stdin.write(json.dumps(line).encode() + b"\n")
        proc.stdin.close()
        assert proc.stderr.readline().startswith(b"ironflow-runtime: ready")
        yield sock, proc
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


async def test_a_prewarmed_runtime_serves_after_its_hand_out_with_the_session_s_env(
    handed_out: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    """The hand-out line brings the token and the session's env: its commands see the env, the
    runtime's own environment never holds it."""
    sock, proc = handed_out
    assert b"GREETING" not in _proc_file(proc.pid, "environ")
    connector = aiohttp.UnixConnector(path=str(sock))
    async with (
        aiohttp.ClientSession(connector=connector, headers=AUTH) as http,
        http.post("http://rt/execute", json={"command": "printenv GREETING"}) as r,
    ):
        assert (await r.json())["stdout"] == "hello\n"


@pytest.mark.parametrize(
    ("args", "line", "text"),
    [
        (["--unix", "s", "--bogus"], b"", b"server.py: error: unrecognized arguments: --bogus"),
        (["--unix", "s", "--port", "1"], b"", b"exactly one of the arguments --unix --port --listen-fd"),
        (["--port", "many"], b"", b"argument --port: invalid int value: 'many'"),
        (["--unix", "s", "--runtime-uid", "5"], b"", b"go with --isolate-commands"),
        (["--unix", "s", "--prewarm"], b'{"token": 5}\n', b"ironflow-runtime: a bad hand-out line"),
        (["--unix", "s", "--prewarm"], b'{"token": "t", "env": {"A": 1}}\n', b"a bad hand-out line"),
        (["--unix", "s", "--traverse", "no-such-home"], b"", b"cannot open no-such-home for traversal"),
    ],
)
def test_a_bad_command_line_or_hand_out_line_ends_the_runtime_with_one_reason(
    tmp_path: Path, args: list[str], line: bytes, text: bytes
) -> None:
    argv = [sys.executable, "-I", "-S", SERVER_PATH, *args]
    done = subprocess.run(argv, input=line, capture_output=True, cwd=tmp_path, timeout=30, check=False)
    assert done.returncode in (1, 2), done.stderr
    assert text in done.stderr, done.stderr
    assert b"Traceback" not in done.stderr
    assert not (tmp_path / "s").exists()
