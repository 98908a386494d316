"""What egress costs: a policy decision, and a CONNECT tunnel next to a bare asyncio TCP relay.

**Decision** (``ironflow.egress.decide`` against a 1,000-rule policy). The proxy decides once per
``CONNECT`` or plain-HTTP request, before it resolves the name, so a decision sits on every
connection's time to first byte. The policy: 1,000 rules (exact names, ``*.suffix`` rules, CIDR
ranges, a few deny rules, two with method and path scopes); the requests: a mix of exact hits, deep
subdomains of a suffix, misses, IP literals in odd spellings (decimal, hex, mapped IPv6),
fixed-deny addresses and plain-HTTP requests with a path. Each decision is timed alone; the floor,
timed the same way in the same run, is ``ipaddress.ip_address`` parsing one address. Target:
decision p50 ≤ 20 µs at 1,000 rules.

**Tunnels**, each relay in its own process (uvloop when installed, as the proxy's ``__main__``):

* ``bare``    a minimal asyncio relay: read the CONNECT head, connect, ``200``, then
              ``read(64 KiB)`` / ``write`` / ``drain`` both ways (no token, policy, SNI check or logs)
* ``egress``  ``python -m ironflow.auth_proxy --egress-listen …``: token lookup, policy before and
              after resolution, the ClientHello's SNI check, per-token limits, a JSON log line per tunnel
* ``direct``  (first byte only) the client straight to the origin

Throughput: ``--size`` bytes in total (default 1 GiB) downloaded over 8 tunnels at once from a
loopback origin, after a real TLS ClientHello (the origin ignores it and streams bytes); MiB/s
and the relay process's CPU seconds per GiB. First byte: 8 workers open a tunnel, send the
ClientHello and wait for the origin's first byte, ``--rounds`` times each; the added p50 is
``egress − direct``. Targets: throughput ≥ 0.8× ``bare``; added first byte ≤ 1 ms p50 at 8.

    python benchmarks/egress.py [--section all|decision|tunnel] [--rules 1000] [--decisions 20000]
                                [--size 1GiB] [--rounds 200]

Last line, the keys of the sections run: ``RESULT decide_p50_us=… decide_p99_us=… vs_target=…
floor_p50_us=… vs_floor=… index_ms=… throughput_vs_bare=… cpu_per_gib_vs_bare=… ttfb_added_p50_ms=…
tunnel_cpu_vs_bare=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import math
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ironflow.auth_proxy import AdminClient, Credential
from ironflow.egress import EgressPolicy, Rule, decide, parse_allow_host
from ironflow.secrets import Secret
from ironflow.testing import tls_hello
from ironflow.testing.ports import free_port

ADMIN_KEY = "bench-admin-key-" + "e" * 32
STREAMS = 8
CHUNK = 1 << 20
TARGETS = {"throughput": 0.8, "ttfb_added_ms": 1.0}
TARGET_P50_US = 20.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


HELLO = tls_hello.client_hello()  # a real first flight (no server name: the tunnels go to 127.0.0.1)


def _use_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # optional, as in the proxy

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


# --- the decision (no I/O) ----------------------------------------------------------------------


def _policy(size: int, rng: random.Random) -> EgressPolicy:
    """``size`` rules: 60% exact names, 30% suffixes, 9% CIDR ranges, 1% deny rules, two scoped."""
    allow: list[Rule] = []
    for i in range(size * 60 // 100):
        allow.append(Rule(f"host{i}.service{i % 37}.example.com", ports=(443,)))
    for i in range(size * 30 // 100):
        allow.append(Rule(f"*.tenant{i}.example.org", ports=None))
    for i in range(size * 9 // 100):
        allow.append(Rule(f"{rng.randrange(1, 223)}.{rng.randrange(256)}.{i % 256}.0/24", ports=(443, 8443)))
    allow.append(Rule("pypi.org", ports=(80,), methods=("GET", "HEAD"), path_prefix="/simple/"))
    allow.append(Rule("*", ports=(8080,), methods=("GET",)))
    deny = [Rule(f"blocked{i}.tenant{i}.example.org") for i in range(max(1, size - len(allow)))]
    return EgressPolicy(allow=tuple(allow[: size - len(deny)]), deny=tuple(deny))


def _requests(count: int, rng: random.Random) -> list[tuple[str, int, str | None, str | None]]:
    """Hosts a sandbox asks for: hits, misses, deep suffix hits, odd IP spellings, plain HTTP."""
    kinds: list[Callable[[], tuple[str, int, str | None, str | None]]] = [
        lambda: (f"host{rng.randrange(600)}.service{rng.randrange(37)}.example.com", 443, None, None),
        lambda: (f"a.b.c.tenant{rng.randrange(300)}.example.org", 443, None, None),
        lambda: (f"blocked{rng.randrange(10)}.tenant{rng.randrange(10)}.example.org", 443, None, None),
        lambda: (f"miss{rng.randrange(10_000)}.example.net", 443, None, None),
        lambda: (str(rng.randrange(1 << 32)), 443, None, None),
        lambda: ("0x7f.1", 80, None, None),
        lambda: ("[::ffff:169.254.169.254]", 80, None, None),
        lambda: (f"{rng.randrange(1, 223)}.{rng.randrange(256)}.{rng.randrange(256)}.9", 8443, None, None),
        lambda: ("pypi.org", 80, "GET", f"/simple/pkg{rng.randrange(1000)}/"),
        lambda: ("PyPI.org.", 80, "POST", "/simple/../admin"),
    ]
    return [rng.choice(kinds)() for _ in range(count)]


def _timed_us(calls: Sequence[Callable[[], object]]) -> list[float]:
    """Each call's own time in microseconds."""
    clock = time.perf_counter_ns
    samples = []
    for call in calls:
        started = clock()
        call()
        samples.append((clock() - started) / 1000)
    return samples


def policy_decision(rules: int, decisions: int) -> dict[str, float]:
    """The decision's p50 and p99 at ``rules`` rules, the floor's p50, and the index's build time."""
    rng = random.Random(30)
    policy = _policy(rules, rng)
    requests = _requests(decisions, rng)
    started = time.perf_counter()
    policy.indexes()
    index_ms = (time.perf_counter() - started) * 1000
    for host, port, method, path in requests[:1000]:  # warm up
        decide(policy, host, port, method=method, path=path)
    samples = _timed_us(
        [lambda r=r: decide(policy, r[0], r[1], method=r[2], path=r[3]) for r in requests]  # type: ignore[misc]
    )
    addresses = [str(ipaddress.IPv4Address(rng.randrange(1 << 32))) for _ in range(decisions)]
    floor = _timed_us([lambda a=a: ipaddress.ip_address(a) for a in addresses])  # type: ignore[misc]
    p50 = statistics.median(samples)
    return {
        "decide_p50_us": p50,
        "decide_p99_us": statistics.quantiles(samples, n=100)[98],
        "vs_target": p50 / TARGET_P50_US,
        "floor_p50_us": statistics.median(floor),
        "vs_floor": p50 / statistics.median(floor),
        "index_ms": index_ms,
    }


# --- the bare relay (its own process) --------------------------------------------------------------


async def _bare_relay(listen: int) -> None:
    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.write_eof()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        host, _, port = head.split(b" ", 2)[1].decode().rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        writer.close()
        up_writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


# --- the origin and the clients (this process) -------------------------------------------------------


class _Origin(asyncio.Protocol):
    """Reads the ClientHello, then sends ``size`` bytes and closes (``size`` 1: one byte, then waits)."""

    payload = memoryview(b"x" * CHUNK)

    def __init__(self, size: int) -> None:
        self.size = size
        self.close_after = size > 1
        self.seen = 0
        self.left = 0
        self.transport: asyncio.Transport | None = None
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses

    def data_received(self, data: bytes) -> None:
        self.seen += len(data)
        if self.seen >= len(HELLO) and self.left == 0 and self.size:
            self.left, self.size = self.size, 0
            self._send()

    def _send(self) -> None:
        assert self.transport is not None
        while self.left > 0 and not self.paused:
            piece = self.payload[: min(CHUNK, self.left)]
            self.transport.write(piece)
            self.left -= len(piece)
        if self.left == 0 and self.close_after:
            self.transport.close()  # after the buffer is flushed

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._send()


class _Download(asyncio.Protocol):
    """A client through a CONNECT proxy (or straight to the origin): counts bytes until EOF."""

    def __init__(self, connect: bytes | None, done: asyncio.Future[int]) -> None:
        self.connect = connect
        self.done = done
        self.head = b""
        self.count = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio's subclasses
        self.transport.write(self.connect if self.connect is not None else HELLO)

    def data_received(self, data: bytes) -> None:
        if self.connect is not None:
            self.head += data
            if b"\r\n\r\n" not in self.head:
                return
            head, _, data = self.head.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                self.done.set_exception(RuntimeError(head.decode(errors="replace")))
                return
            self.connect = None
            assert self.transport is not None
            self.transport.write(HELLO)
        self.count += len(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.count)


def _same(protocol: _Download) -> Callable[[], _Download]:
    return lambda: protocol


def _connect_head(port: int, token: str | None) -> bytes:
    auth = f"Proxy-Authorization: Bearer {token}\r\n" if token else ""
    return f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n{auth}\r\n".encode()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


async def _download(relay_port: int, origin_port: int, token: str | None, size: int) -> float:
    """Seconds to pull ``size`` bytes over :data:`STREAMS` tunnels at once."""
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[int]] = [loop.create_future() for _ in range(STREAMS)]
    started = time.perf_counter()
    transports = []
    for future in futures:
        download = _Download(_connect_head(origin_port, token), future)
        transport, _ = await loop.create_connection(_same(download), "127.0.0.1", relay_port)
        transports.append(transport)
    counts = await asyncio.gather(*futures)
    elapsed = time.perf_counter() - started
    for transport in transports:
        transport.close()
    if sum(counts) != size:
        raise RuntimeError(f"got {sum(counts)} of {size} bytes")
    return elapsed


async def _first_byte(port: int, origin_port: int, token: str | None, tunnel: bool) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if tunnel:
        writer.write(_connect_head(origin_port, token))
        await reader.readuntil(b"\r\n\r\n")
    writer.write(HELLO)
    await reader.readexactly(1)
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


async def _ttfb_p50(port: int, origin_port: int, token: str | None, *, tunnel: bool, rounds: int) -> float:
    samples: list[float] = []

    async def worker() -> None:
        for _ in range(rounds):
            samples.append(await _first_byte(port, origin_port, token, tunnel))

    for _ in range(3):
        await _first_byte(port, origin_port, token, tunnel)  # warm: the token is cached now
    await asyncio.gather(*(worker() for _ in range(STREAMS)))
    return statistics.median(samples) * 1000


# --- the run ----------------------------------------------------------------------------------------


@dataclass
class Relay:
    port: int
    process: subprocess.Popen[bytes]


@contextlib.contextmanager
def _bare(log: Path) -> Iterator[Relay]:
    port = free_port()
    argv = [sys.executable, __file__, "--bare-relay", str(port)]
    with _started(argv, dict(os.environ), port, log) as process:
        yield Relay(port, process)


@contextlib.contextmanager
def _egress(log: Path) -> Iterator[tuple[Relay, str]]:
    port, admin_port = free_port(), free_port()
    env = {
        **os.environ,
        "IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN_KEY,
        "IRONFLOW_AUTH_PROXY_LISTEN": f"127.0.0.1:{admin_port}",
        "RUST_LOG": "info",
    }
    argv = [sys.executable, "-m", "ironflow.auth_proxy", "--egress-listen", f"127.0.0.1:{port}"]
    with _started(argv, env, port, log) as process:
        yield Relay(port, process), f"http://127.0.0.1:{admin_port}"


@contextlib.contextmanager
def _started(argv: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, env=env, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[1:3]} did not start; see {log}")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(10)


@contextlib.asynccontextmanager
async def _origins(per_stream: int) -> AsyncIterator[tuple[int, int]]:
    loop = asyncio.get_running_loop()
    bulk = await loop.create_server(lambda: _Origin(per_stream), "127.0.0.1", 0)
    first = await loop.create_server(lambda: _Origin(1), "127.0.0.1", 0)
    try:
        yield bulk.sockets[0].getsockname()[1], first.sockets[0].getsockname()[1]
    finally:
        bulk.close()
        first.close()


async def _issue(admin_url: str, *ports: int) -> str:
    policy = EgressPolicy(allow=tuple(parse_allow_host(f"127.0.0.1:{port}") for port in ports))
    async with AdminClient(admin_url, ADMIN_KEY) as admin:
        credential = Credential("api_key", Secret("sk-bench"))
        issued = await admin.issue("bench", "egress", int(time.time()) + 3600, credential=credential, egress=policy)
    return issued.token.reveal()


async def _tunnel_cpu_us(relay: Relay, origin_port: int, token: str | None, count: int) -> float:
    """The relay process's CPU per first-byte tunnel (4 at a time), in µs: robust to a loaded machine."""

    async def worker() -> None:
        for _ in range(count // 4):
            await _first_byte(relay.port, origin_port, token, True)

    before = _cpu_s(relay.process.pid)
    await asyncio.gather(*(worker() for _ in range(4)))
    await asyncio.sleep(0.3)  # the last tunnels' close and log line
    return (_cpu_s(relay.process.pid) - before) / (count // 4 * 4) * 1e6


async def _run(size: int, rounds: int, logs: Path) -> dict[str, float]:
    per_stream = size // STREAMS
    size = per_stream * STREAMS
    figures: dict[str, float] = {}
    async with _origins(per_stream) as (bulk_port, first_port):
        with _bare(logs / "bare.log") as bare, _egress(logs / "egress.log") as (egress, admin_url):
            token = await _issue(admin_url, bulk_port, first_port)
            relays = (("bare", bare, None), ("egress", egress, token))
            for name, _, _ in relays:
                figures[f"{name}_mib_s"] = figures[f"{name}_cpu_s_per_gib"] = 0.0
            for _ in range(2):  # interleaved, best of two: the machine's load drifts
                for name, relay, auth in relays:
                    before = _cpu_s(relay.process.pid)
                    elapsed = await _download(relay.port, bulk_port, auth, size)
                    cpu = (_cpu_s(relay.process.pid) - before) / (size / (1 << 30))
                    figures[f"{name}_mib_s"] = max(figures[f"{name}_mib_s"], size / (1 << 20) / elapsed)
                    figures[f"{name}_cpu_s_per_gib"] = min(figures[f"{name}_cpu_s_per_gib"] or cpu, cpu)
            figures["direct_ttfb_ms"] = await _ttfb_p50(first_port, first_port, None, tunnel=False, rounds=rounds)
            for name, relay, auth in relays:
                figures[f"{name}_ttfb_ms"] = await _ttfb_p50(relay.port, first_port, auth, tunnel=True, rounds=rounds)
                figures[f"{name}_tunnel_cpu_us"] = await _tunnel_cpu_us(relay, first_port, auth, 8 * rounds)
    return figures


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    lowered = text.strip().lower().removesuffix("ib").removesuffix("b")
    scale = units.get(lowered[-1:], 1)
    number = lowered[:-1] if lowered[-1:] in units else lowered
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1GiB, 64MiB)") from None
    if value < STREAMS * CHUNK:
        raise argparse.ArgumentTypeError(f"--size must be at least {STREAMS} MiB")
    return value


def _print_decision(found: dict[str, float], rules: int, decisions: int) -> None:
    print(f"policy decision, {rules} rules, {decisions} decisions")
    print(f"  decide p50          {found['decide_p50_us']:8.2f} us   (target ≤ {TARGET_P50_US:.0f} us)")
    print(f"  decide p99          {found['decide_p99_us']:8.2f} us")
    print(f"  floor p50           {found['floor_p50_us']:8.2f} us   (ipaddress.ip_address of one address)")
    print(f"  index build         {found['index_ms']:8.2f} ms   (once per policy)")
    print(f"  vs target {found['vs_target']:.2f}x, vs floor {found['vs_floor']:.2f}x")


def _ratio(value: float, floor: float) -> float:
    """``value / floor``; nan when the floor measured nothing (a short run's CPU clock reads 0 at its 10 ms tick)."""
    return value / floor if floor > 0 else math.nan


def _print_tunnels(figures: dict[str, float], size: int) -> dict[str, float]:
    throughput = _ratio(figures["egress_mib_s"], figures["bare_mib_s"])
    cpu = _ratio(figures["egress_cpu_s_per_gib"], figures["bare_cpu_s_per_gib"])
    added = figures["egress_ttfb_ms"] - figures["direct_ttfb_ms"]
    added_bare = figures["bare_ttfb_ms"] - figures["direct_ttfb_ms"]
    print(f"tunnels: {size / (1 << 20):.0f} MiB over {STREAMS} tunnels; first byte at {STREAMS} concurrent")
    for name in ("bare", "egress"):
        print(
            f"  {name:7s} {figures[f'{name}_mib_s']:8.0f} MiB/s  {figures[f'{name}_cpu_s_per_gib']:6.2f} CPU s/GiB"
            f"  first byte p50 {figures[f'{name}_ttfb_ms']:.3f} ms"
            f"  {figures[f'{name}_tunnel_cpu_us']:.0f} µs CPU/tunnel"
        )
    print(f"  direct  first byte p50 {figures['direct_ttfb_ms']:.3f} ms")
    print(f"  throughput vs bare {throughput:.2f}x (target >= {TARGETS['throughput']}x)")
    print(f"  relay CPU per GiB vs bare {cpu:.2f}x")
    target = TARGETS["ttfb_added_ms"]
    print(f"  added first byte p50: egress {added:.3f} ms, bare {added_bare:.3f} ms (target <= {target} ms)")
    return {
        "throughput_vs_bare": throughput,
        "cpu_per_gib_vs_bare": cpu,
        "ttfb_added_p50_ms": added,
        "tunnel_cpu_vs_bare": _ratio(figures["egress_tunnel_cpu_us"], figures["bare_tunnel_cpu_us"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=("all", "decision", "tunnel"), default="all")
    parser.add_argument("--rules", type=int, default=1000, help="rules in the decision's policy")
    parser.add_argument("--decisions", type=int, default=20_000, help="decisions timed")
    parser.add_argument("--size", type=_size, default=1 << 30, help="bytes through the tunnels in total (1GiB)")
    parser.add_argument("--rounds", type=int, default=200, help="first-byte samples per worker (8 workers)")
    parser.add_argument("--bare-relay", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _use_uvloop()
    if args.bare_relay is not None:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_bare_relay(args.bare_relay))
        return 0
    result: dict[str, float] = {}
    if args.section in ("all", "decision"):
        found = policy_decision(args.rules, args.decisions)
        _print_decision(found, args.rules, args.decisions)
        result.update(found)
    if args.section in ("all", "tunnel"):
        with tempfile.TemporaryDirectory(prefix="ironflow-egress-bench-") as logs:
            figures = asyncio.run(_run(args.size, args.rounds, Path(logs)))
        result.update(_print_tunnels(figures, args.size))
    print("RESULT " + " ".join(f"{key}={value:.3f}" for key, value in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
