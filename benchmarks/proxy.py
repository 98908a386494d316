"""What the auth proxy costs on an SSE workload, next to nginx as a plain reverse proxy.

One workload for every scenario: ``POST /v1/messages`` answered by a fast upstream
(nginx returning a realistic 50-event Messages stream, ~9 KB) and driven by ``wrk``
with a Lua script, 64 concurrent connections, a few seconds per scenario:

* ``direct``     wrk → upstream
* ``nginx``      wrk → nginx (proxy_buffering off, keep-alive upstream) → upstream
* ``memory``     wrk → ``python -m ironflow.auth_proxy --workers N`` (in-memory registry in the
                 parent, shared over the hub socket, cached in each worker) → upstream
* ``postgres``   wrk → ``python -m ironflow.auth_proxy --workers N`` (PostgreSQL registry) → upstream
* ``bare``       reference only: a minimal aiohttp relay (no token, policy, metrics or logs), N processes

Every feature of the proxy is on: token check, header policy, metrics, and JSON logs
at ``info`` (one ``relayed`` line per request, written to a file). Proxy CPU per
request is the proxy processes' user+system CPU time over the run divided by the
requests completed. The added p50 latency is measured at 8 concurrent streams
against ``direct``. Needs nginx, wrk and PostgreSQL (initdb/pg_ctl).

    python benchmarks/proxy.py [--seconds 4] [--workers 2]

The proxy runs with its shipped limits on (connection cap, header and idle timeouts,
request-body budget). Targets: ≥ 0.2× nginx req/s (memory), ≥ 0.18× (PostgreSQL),
≥ 1.0× the bare aiohttp relay measured in the same run (the Python floor on this
machine), ≤ 200 µs proxy CPU per request, ≤ 1 ms p50 added at 8 streams. Last line:
``RESULT rps_vs_nginx_memory=… rps_vs_nginx_postgres=… rps_vs_bare_memory=… rps_vs_bare_postgres=…
cpu_us_per_request=… p50_added_ms_at_8=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ironflow.auth_proxy import AdminClient, Credential
from ironflow.secrets import Secret
from ironflow.testing.ports import free_port
from ironflow.testing.postgres_server import PostgresServer

ADMIN_KEY = "bench-admin-key-" + "b" * 32
CREDENTIAL = "sk-ant-oat01-benchmark-credential"
KEY_RING = "1:" + "5a" * 32
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {"memory": 0.2, "postgres": 0.18, "bare": 1.0, "cpu_us": 200.0, "p50_added_ms": 1.0}

REQUEST_BODY = json.dumps(
    {
        "model": "claude-sonnet-5-5",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "Summarise the last deployment log in three bullet points."}],
    }
)


def _stream_body() -> str:
    """A Messages API stream of 50 SSE events (message_start … 46 text deltas … message_stop)."""

    def event(name: str, data: dict[str, object]) -> str:
        return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"

    words = ["The", "deployment", "rolled", "out", "cleanly", "across", "all", "regions", "with"]
    words += ["no", "failed", "health", "checks"]
    parts = [
        event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-5-5",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 25, "output_tokens": 1},
                },
            },
        ),
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    for i in range(45):
        parts.append(
            event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": words[i % len(words)] + " "},
                },
            )
        )
    parts.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    parts.append(event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                         "usage": {"output_tokens": 45}}))  # fmt: skip
    parts.append(event("message_stop", {"type": "message_stop"}))
    assert len(parts) == 50
    body = "".join(parts)
    return body


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port} after {timeout:.0f}s")


@contextlib.contextmanager
def _nginx(workdir: Path, name: str, server_block: str) -> Iterator[None]:
    root = workdir / name
    root.mkdir()
    conf = root / "nginx.conf"
    conf.write_text(
        f"""
daemon off;
worker_processes auto;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    keepalive_requests 1000000;
    {server_block}
}}
"""
    )
    proc = subprocess.Popen(["nginx", "-p", str(root), "-c", str(conf)], stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def _upstream_block(port: int, body_file: Path) -> str:
    # nginx's static module refuses POST with 405; error_page turns that into the file's 200.
    return f"""
    server {{
        listen 127.0.0.1:{port};
        location = /v1/messages {{
            types {{ }}
            default_type text/event-stream;
            alias {body_file};
            error_page 405 =200 $uri;
            add_header anthropic-ratelimit-unified-status allowed;
            add_header request-id req_bench;
        }}
    }}"""


def _reverse_proxy_block(port: int, upstream_port: int) -> str:
    return f"""
    upstream anthropic {{ server 127.0.0.1:{upstream_port}; keepalive 128; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://anthropic;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}"""


@dataclass(frozen=True)
class Run:
    name: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_us: float | None = None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def _wrk_script(workdir: Path, token: str | None) -> Path:
    script = workdir / f"post-{'token' if token else 'plain'}.lua"
    headers = 'wrk.headers["Content-Type"] = "application/json"\n'
    headers += 'wrk.headers["anthropic-version"] = "2023-06-01"\n'
    if token:
        headers += f'wrk.headers["Authorization"] = "Bearer {token}"\n'
    script.write_text(
        f"""wrk.method = "POST"
wrk.body = [[{REQUEST_BODY}]]
{headers}
done = function(summary, latency, requests)
  local errs = summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.status + summary.errors.timeout
  io.write(string.format("WRKJSON {{\\"requests\\": %d, \\"duration_us\\": %d, \\"p50_us\\": %d, "
      .. "\\"p99_us\\": %d, \\"errors\\": %d}}\\n",
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), errs))
end
"""
    )
    return script


def _cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total


def _children(pid: int) -> list[int]:
    found = [pid]
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(FileNotFoundError):
                found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return found


def _wrk(name: str, url: str, script: Path, *, connections: int, seconds: int, cpu_pids: list[int]) -> Run:
    before = _cpu_ticks(cpu_pids)
    done = subprocess.run(
        ["wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    )
    ticks = _cpu_ticks(cpu_pids) - before
    line = next(x for x in done.stdout.splitlines() if x.startswith("WRKJSON "))
    data = json.loads(line.removeprefix("WRKJSON "))
    requests = int(data["requests"])
    cpu_us = ticks / CLOCK_TICKS * 1e6 / requests if cpu_pids and requests else None
    return Run(
        name, requests, data["duration_us"] / 1e6, data["p50_us"] / 1000, data["p99_us"] / 1000, data["errors"], cpu_us
    )


@contextlib.contextmanager
def _proxy(argv: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, env=env, stderr=sink, stdout=subprocess.DEVNULL)
        try:
            _wait_port(port)
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


async def _issue(url: str) -> str:
    async with AdminClient(url, ADMIN_KEY) as admin:
        issued = await admin.issue(
            "bench-run", "bench", int(time.time()) + 3600, credential=Credential("oauth_token", Secret(CREDENTIAL))
        )
        return issued.token.reveal()


#: Reference point only (not ironflow): the smallest aiohttp relay, no token, policy, metrics or logs.
BARE_RELAY = """
import asyncio, sys
import aiohttp
from aiohttp import web

try:  # the same event loop as the proxy's (__main__._use_uvloop), or the floor is not comparable
    import uvloop
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
except ImportError:
    pass

UPSTREAM = sys.argv[2]
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}

async def relay(request):
    session = request.app["session"]
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
    async with session.request(request.method, UPSTREAM + request.rel_url.raw_path_qs, headers=headers,
                               data=body or None) as upstream:
        response = web.StreamResponse(status=upstream.status,
                                      headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP})
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response

async def session_ctx(app):
    app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)
    yield
    await app["session"].close()

app = web.Application()
app.router.add_route("*", "/{tail:.*}", relay)
app.cleanup_ctx.append(session_ctx)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), reuse_port=True, access_log=None, print=None)
"""


def _proxy_env(port: int, upstream_port: int, database_url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRONFLOW_", "ANTHROPIC_", "CLAUDE_"))}
    env.update(
        {
            "IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN_KEY,
            "IRONFLOW_AUTH_PROXY_LISTEN": f"127.0.0.1:{port}",
            "IRONFLOW_AUTH_PROXY_UPSTREAM": f"http://127.0.0.1:{upstream_port}",
            "RUST_LOG": "info",
        }
    )
    if database_url is not None:
        env["IRONFLOW_AUTH_PROXY_DATABASE_URL"] = database_url
        env["IRONFLOW_SECRET_KEYS"] = KEY_RING
    return env


def _fmt(run: Run) -> str:
    cpu = f"{run.cpu_us:9.0f}" if run.cpu_us is not None else "        -"
    return f"{run.name:<26} {run.rps:>10.0f} {run.p50_ms:>9.2f} {run.p99_ms:>9.2f} {cpu} {run.errors:>7}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=4, help="duration of each wrk run (whole seconds: wrk's -d)")
    parser.add_argument("--workers", type=int, default=2, help="proxy worker processes (both registries)")
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    if args.seconds < 1:
        parser.error("--seconds must be at least 1")
    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: apt-get install -y {tool}")
    body = _stream_body()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="ironflow-bench-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)  # noqa: S103 - nginx workers run as nobody and read the stream file
        upstream_port, nginx_port, memory_port, pg_port, bare_port = (free_port() for _ in range(5))
        plain = _wrk_script(workdir, None)
        body_file = workdir / "stream.txt"
        body_file.write_text(body)
        os.chmod(body_file, 0o644)
        with (
            _nginx(workdir, "upstream", _upstream_block(upstream_port, body_file)),
            _nginx(workdir, "proxy", _reverse_proxy_block(nginx_port, upstream_port)),
        ):
            _wait_port(upstream_port)
            _wait_port(nginx_port)
            url = "/v1/messages?beta=true"
            c, s = args.connections, args.seconds
            runs.append(_wrk("direct", f"http://127.0.0.1:{upstream_port}{url}", plain, connections=c, seconds=s,
                             cpu_pids=[]))  # fmt: skip
            direct_8 = _wrk("direct @8", f"http://127.0.0.1:{upstream_port}{url}", plain, connections=8, seconds=s,
                            cpu_pids=[])  # fmt: skip
            runs.append(_wrk("nginx", f"http://127.0.0.1:{nginx_port}{url}", plain, connections=c, seconds=s,
                             cpu_pids=[]))  # fmt: skip
            bare = [
                subprocess.Popen(
                    [sys.executable, "-c", BARE_RELAY, str(bare_port), f"http://127.0.0.1:{upstream_port}"],
                    stderr=subprocess.DEVNULL,
                )
                for _ in range(args.workers)
            ]
            try:
                _wait_port(bare_port)
                time.sleep(0.5)
                runs.append(
                    _wrk(f"bare aiohttp relay ({args.workers} proc)", f"http://127.0.0.1:{bare_port}{url}", plain,
                         connections=c, seconds=s, cpu_pids=[b.pid for b in bare])
                )  # fmt: skip
            finally:
                for proc in bare:
                    proc.terminate()
                    proc.wait(10)
            memory_argv = [sys.executable, "-m", "ironflow.auth_proxy", "--workers", str(args.workers)]
            with _proxy(memory_argv, _proxy_env(memory_port, upstream_port), memory_port, workdir / "memory.log") as p:
                time.sleep(1.0)  # every worker bound
                token = asyncio.run(_issue(f"http://127.0.0.1:{memory_port}"))
                script = _wrk_script(workdir, token)
                target = f"http://127.0.0.1:{memory_port}{url}"
                pids = _children(p.pid)
                name = f"ironflow memory ({args.workers} proc)"
                runs.append(_wrk(name, target, script, connections=c, seconds=s, cpu_pids=pids))
                memory_8 = _wrk("ironflow memory @8", target, script, connections=8, seconds=s, cpu_pids=pids)
            with PostgresServer() as dsn:
                pg_argv = [sys.executable, "-m", "ironflow.auth_proxy", "--workers", str(args.workers)]
                env = _proxy_env(pg_port, upstream_port, dsn)
                with _proxy(pg_argv, env, pg_port, workdir / "postgres.log") as p:
                    time.sleep(1.0)  # every worker bound and migrated
                    token = asyncio.run(_issue(f"http://127.0.0.1:{pg_port}"))
                    pids = _children(p.pid)
                    runs.append(
                        _wrk(f"ironflow postgres ({args.workers} proc)", f"http://127.0.0.1:{pg_port}{url}",
                             _wrk_script(workdir, token), connections=c, seconds=s, cpu_pids=pids)
                    )  # fmt: skip
            relayed_lines = sum(1 for line in (workdir / "memory.log").open() if '"relayed"' in line)
    runs.extend([direct_8, memory_8])
    by_name = {r.name.split(" (")[0]: r for r in runs}
    nginx = by_name["nginx"]
    bare_run = by_name["bare aiohttp relay"]
    memory = by_name["ironflow memory"]
    postgres = by_name["ironflow postgres"]
    print(f"{'scenario':<26} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'cpu µs':>9} {'errors':>7}")
    for run in runs:
        print(_fmt(run))
    cpu_us = max(r.cpu_us for r in (memory, postgres) if r.cpu_us is not None)
    rps_memory = memory.rps / nginx.rps
    rps_postgres = postgres.rps / nginx.rps
    # The Python floor on this machine, measured in this same run: a relay with no policy at all.
    bare_memory = memory.rps / bare_run.rps
    bare_postgres = postgres.rps / bare_run.rps
    p50_added = memory_8.p50_ms - direct_8.p50_ms
    print(f"relayed log lines written by the memory proxy: {relayed_lines}")
    print(
        f"targets: memory ≥ {TARGETS['memory']}× nginx, postgres ≥ {TARGETS['postgres']}×, "
        f"both ≥ {TARGETS['bare']}× the bare aiohttp relay, "
        f"cpu ≤ {TARGETS['cpu_us']:.0f} µs/request, p50 added ≤ {TARGETS['p50_added_ms']} ms at 8 streams"
    )
    print(
        f"RESULT rps_vs_nginx_memory={rps_memory:.3f} rps_vs_nginx_postgres={rps_postgres:.3f} "
        f"rps_vs_bare_memory={bare_memory:.3f} rps_vs_bare_postgres={bare_postgres:.3f} "
        f"cpu_us_per_request={cpu_us:.0f} p50_added_ms_at_8={p50_added:.3f}"
    )


if __name__ == "__main__":
    main()
