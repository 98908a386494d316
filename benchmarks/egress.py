"""What an egress decision costs: ``ironflow.egress.decide`` against a 1,000-rule policy.

The proxy decides once per ``CONNECT`` or plain-HTTP request, before it resolves the name, so a
decision sits on every connection's time to first byte. The policy: 1,000 rules (exact names,
``*.suffix`` rules, CIDR ranges, a few deny rules, two with method and path scopes); the
requests: a mix of exact hits, deep subdomains of a suffix, misses, IP literals in odd
spellings (decimal, hex, mapped IPv6), fixed-deny addresses and plain-HTTP requests with a
path. Each decision is timed alone; the floor, timed the same way in the same run, is
``ipaddress.ip_address`` parsing one address (the least a decision about an address could do).

    python benchmarks/egress.py [--rules 1000] [--decisions 20000]

Target: decision p50 ≤ 20 µs at 1,000 rules. Last line:
``RESULT decide_p50_us=… decide_p99_us=… vs_target=… floor_p50_us=… vs_floor=… index_ms=…``
(``vs_target`` ≤ 1 meets the target).
"""

from __future__ import annotations

import argparse
import ipaddress
import random
import statistics
import time
from collections.abc import Callable, Sequence

from ironflow.egress import EgressPolicy, Rule, decide

TARGET_P50_US = 20.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description="Egress decision cost")
    parser.add_argument("--rules", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=20_000)
    opts = parser.parse_args()
    found = policy_decision(opts.rules, opts.decisions)
    print(f"policy decision, {opts.rules} rules, {opts.decisions} decisions")
    print(f"  decide p50          {found['decide_p50_us']:8.2f} us   (target ≤ {TARGET_P50_US:.0f} us)")
    print(f"  decide p99          {found['decide_p99_us']:8.2f} us")
    print(f"  floor p50           {found['floor_p50_us']:8.2f} us   (ipaddress.ip_address of one address)")
    print(f"  index build         {found['index_ms']:8.2f} ms   (once per policy)")
    print(f"  vs target {found['vs_target']:.2f}x, vs floor {found['vs_floor']:.2f}x")
    print("RESULT " + " ".join(f"{key}={value:.3f}" for key, value in found.items()))


if __name__ == "__main__":
    main()
