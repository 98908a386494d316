"""Parsing Claude Code output: how long a step's log takes to become an AgentResult.

A pod log is read whole (capped at 50 MiB by the providers), then parsed; a long agent
run prints thousands of stream-json lines. Cases: one ``json`` result object, the
captured tool-turn stream, and that stream's turns repeated to about 10 MiB, plus
``collect_rate_limits`` over the same 10 MiB log.

    python benchmarks/claude_output.py [--repeat 20]

Target: a 10 MiB stream parses in under 1 s (about 10 MB/s or better).
Last line: ``RESULT json_us=… stream_small_us=… stream_10mib_ms=… stream_mb_per_s=… rate_limits_10mib_ms=…``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ironflow.claude import output, rate_limits
from ironflow.steps import AgentConfig

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "claude"


def median_s(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def big_stream(target_bytes: int) -> str:
    """The tool-turn stream with its middle (assistant/user lines) repeated to ``target_bytes``."""
    lines = (FIXTURES / "stream_tool.out").read_text().splitlines()
    head, body, tail = lines[:1], lines[1:-1], lines[-1:]
    rate_line = (FIXTURES / "stream_rate_limits.out").read_text().splitlines()[2]
    block = "\n".join([*body, rate_line])
    copies = max(1, target_bytes // (len(block) + 1))
    return "\n".join([*head, *([block] * copies), *tail])


def main() -> None:
    parser = argparse.ArgumentParser(description="Claude output parsing speed")
    parser.add_argument("--repeat", type=int, default=20)
    opts = parser.parse_args()
    plain, verbose = AgentConfig("x"), AgentConfig("x", verbose=True)
    json_text = (FIXTURES / "json_text.out").read_text()
    small = (FIXTURES / "stream_tool.out").read_text()
    big = big_stream(10 * 1024 * 1024)
    big_mb = len(big.encode()) / 1e6

    json_s = median_s(lambda: output.parse_response(json_text, plain, wall_ms=1), opts.repeat * 50)
    small_s = median_s(lambda: output.parse_stream_response(small, verbose, wall_ms=1), opts.repeat * 50)
    big_s = median_s(lambda: output.parse_stream_response(big, verbose, wall_ms=1), max(3, opts.repeat // 4))
    rl_s = median_s(lambda: rate_limits.collect_rate_limits(big), max(3, opts.repeat // 4))

    rows = [
        ("json result object", f"{len(json_text)} B", f"{json_s * 1e6:.1f} us"),
        ("stream-json, tool turn", f"{len(small)} B", f"{small_s * 1e6:.1f} us"),
        ("stream-json, ~10 MiB", f"{big_mb:.1f} MB", f"{big_s * 1e3:.1f} ms"),
        ("rate limits, ~10 MiB", f"{big_mb:.1f} MB", f"{rl_s * 1e3:.1f} ms"),
    ]
    print(f"{'case':<26}{'input':>10}{'median':>14}")
    for name, size, took in rows:
        print(f"{name:<26}{size:>10}{took:>14}")
    print(
        f"RESULT json_us={json_s * 1e6:.1f} stream_small_us={small_s * 1e6:.1f} "
        f"stream_10mib_ms={big_s * 1e3:.1f} stream_mb_per_s={big_mb / big_s:.1f} rate_limits_10mib_ms={rl_s * 1e3:.1f}"
    )


if __name__ == "__main__":
    main()
