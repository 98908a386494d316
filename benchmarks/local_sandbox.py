"""What the local sandbox adds to a short command: bare, under bubblewrap, under gVisor.

The same command (``true``) runs ``--runs`` times each way, interleaved, through the same
asyncio subprocess path; the bubblewrap and gVisor cases go through
``LocalSandboxProvider.run_command`` (argv rendering, temp dir, fresh namespaces,
teardown included). A case whose runtime is missing is reported as skipped.

    python benchmarks/local_sandbox.py [--runs 20]

Target: bubblewrap adds at most 30 ms. Last line:
``RESULT bwrap_added_ms=… gvisor_added_ms=…`` (``nan`` when skipped).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import statistics
import time

from ironflow.local.sandbox_provider import LocalSandboxProvider

COMMAND = ["true"]
TARGET_BWRAP_ADDED_MS = 30.0


async def _bare_once() -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *COMMAND, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    await proc.communicate()
    return (time.perf_counter() - start) * 1000


async def _sandboxed_once(provider: LocalSandboxProvider) -> float:
    start = time.perf_counter()
    result = await provider.run_command(COMMAND)
    elapsed = (time.perf_counter() - start) * 1000
    if result.exit_code != 0:
        raise SystemExit(f"{provider.isolation}: {COMMAND} failed: {result.stderr.strip()}")
    return elapsed


async def _measure(runs: int, isolations: list[str]) -> dict[str, list[float]]:
    """Interleaved, so a busy machine slows every case alike rather than one of them."""
    providers = {i: LocalSandboxProvider(isolation=i, timeout=30) for i in isolations}  # type: ignore[arg-type]
    times: dict[str, list[float]] = {"bare": [], **{i: [] for i in isolations}}
    for _ in range(runs):
        times["bare"].append(await _bare_once())
        for isolation, provider in providers.items():
            times[isolation].append(await _sandboxed_once(provider))
    return times


async def main(runs: int) -> None:
    available = [i for i, binary in (("bwrap", "bwrap"), ("gvisor", "runsc")) if shutil.which(binary) is not None]
    times = await _measure(runs, available)
    bare = statistics.median(times["bare"])
    rows: list[tuple[str, float, float]] = [("bare", bare, 0.0)]
    added: dict[str, float] = {}
    for isolation, binary in (("bwrap", "bwrap"), ("gvisor", "runsc")):
        if isolation not in times:
            rows.append((f"{isolation} (skipped: {binary} missing)", math.nan, math.nan))
            added[isolation] = math.nan
            continue
        median = statistics.median(times[isolation])
        added[isolation] = median - bare
        rows.append((isolation, median, median - bare))
    print(f"{'case':<34} {'median ms':>10} {'added ms':>10}   ({runs} runs each, `{' '.join(COMMAND)}`)")
    for name, median, extra in rows:
        print(f"{name:<34} {median:>10.2f} {extra:>10.2f}")
    verdict = "met" if added["bwrap"] <= TARGET_BWRAP_ADDED_MS else "MISSED"
    print(f"target: bubblewrap adds <= {TARGET_BWRAP_ADDED_MS:g} ms: {verdict}")
    print(f"RESULT bwrap_added_ms={added['bwrap']:.2f} gvisor_added_ms={added['gvisor']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per case (default 20)")
    asyncio.run(main(parser.parse_args().runs))
