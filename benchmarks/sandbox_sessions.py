"""What a local sandbox session costs and saves: opening, a command's round trip, the router, memory.

One run measures, interleaved where two cases are compared:

- opening a local session (``LocalSessions.open``, bubblewrap and the runtime ready), p50, cold
  and from a full pool of warm sessions, beside its floor: a minimal bubblewrap running the same
  Python with ``-c pass`` (the three interleaved);
- ``true`` in an open session (ironflow's client on the runtime socket) minus ``subprocess.run``
  of ``true`` on the host (the two interleaved), p50, and a fresh ``LocalSandboxProvider.run_command``
  per command against it (how many times faster the session is);
- ``true`` through ``ironflow sandbox serve``'s router (in this process) by the upstream
  ``k8s-agent-sandbox`` SDK minus ironflow's own client through the same router, p50, and
  ironflow's client through the router minus the same client on the socket;
- the proportional set size (PSS, every process of the session) per idle session, with
  ``--idle`` of them open;
- ``--at-once`` sessions (50) opened at once, then ``true`` in each, all at once: the errors,
  and the commands' p99 over their p50;
- the same opening and round trips under gVisor (``isolation="gvisor"``, runsc), beside
  bubblewrap's in the same run, the opening beside its floor, interleaved: ``runsc run`` of
  ``true`` with runsc's flags as ironflow passes them and the least spec (the host root read-only,
  ``/proc``, fresh namespaces) (``nan`` without runsc).

    python benchmarks/sandbox_sessions.py [--runs 30] [--idle 10] [--at-once 50]

Targets: open <= 50 ms and <= 2x its floor; under gVisor <= 2x ``runsc run true``; from the
pool <= 10 ms; a session adds <= 0.5 ms to a command (p50, over ``subprocess.run`` on the host)
and is >= 5x faster than a fresh sandbox;
the SDK adds <= 5 ms over ironflow's client; an idle session <= 10 MiB; 50 at once: no error,
p99 <= 5x p50. Last line: ``RESULT open_p50_ms=… open_floor_p50_ms=… open_over_floor=…
pool_open_p50_ms=… rtt_added_ms=… vs_fresh_speedup=… sdk_added_ms=… router_added_ms=…
idle_pss_mib=… at_once_errors=… at_once_p99_over_p50=… gvisor_open_p50_ms=… gvisor_open_floor_p50_ms=…
gvisor_open_over_floor=… gvisor_rtt_added_ms=… gvisor_vs_fresh_speedup=…``
(``sdk_added_ms`` is ``nan`` without the SDK, the ``gvisor_`` ones without runsc).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.sandbox_router.process import serve
from ironflow.secrets import Secret
from ironflow.sessions import AsyncSandbox, OpenOptions, PoolPolicy
from ironflow.sessions.remote import RemoteSessions

COMMAND = ["true"]
#: The interpreter the sessions' runtime runs (its real path), started by the floor too.
PYTHON = os.path.realpath(sys.executable)
#: The least bubblewrap that starts a process in new namespaces, for the floor of a cold open.
FLOOR_BWRAP = ("bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent")
TOKEN = Secret("benchmark-token-0123456789abcdef")
TARGETS = {
    "open_p50_ms": 50.0,
    "open_over_floor": 2.0,
    "gvisor_open_over_floor": 2.0,
    "pool_open_p50_ms": 10.0,
    "rtt_added_ms": 0.5,
    "sdk_added_ms": 5.0,
    "idle_pss_mib": 10.0,
}
TARGET_SPEEDUP = 5.0
TARGET_AT_ONCE_P99_OVER_P50 = 5.0


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


async def _ms(action: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await action()
    return (time.perf_counter() - start) * 1000


def _pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:")), 0)


async def _floor_once(python: str) -> float:
    """The floor of a cold open: a minimal bubblewrap starting the same interpreter, ``-c pass``."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*FLOOR_BWRAP, python, "-I", "-S", "-c", "pass")
    if await proc.wait() != 0:
        raise SystemExit(f"the minimal bubblewrap failed (exit {proc.returncode})")
    return (time.perf_counter() - start) * 1000


async def _opening_compared(state: str, runs: int) -> dict[str, list[float]]:
    """A cold open, its floor and an open from a full pool of warm sessions, interleaved; the pool
    refills before each round, so its starts never overlap a measured open."""
    times: dict[str, list[float]] = {"floor": [], "cold": [], "pooled": []}
    python = PYTHON
    async with (
        LocalSessions(LocalSandboxProvider(), state_dir=state) as cold,
        LocalSandboxProvider().sessions(state_dir=state, pool=PoolPolicy(1)) as pooled,
    ):
        assert pooled.pool is not None
        for _ in range(runs):
            await pooled.pool.full()
            warm = {member.proc.pid for member in pooled.pool.waiting()}
            times["floor"].append(await _floor_once(python))
            for name, sessions in (("cold", cold), ("pooled", pooled)):
                start = time.perf_counter()
                sandbox = await sessions.open(OpenOptions(ttl=60))
                times[name].append((time.perf_counter() - start) * 1000)
                if name == "pooled" and pooled.host_pids(sandbox.id)[0] not in warm:
                    raise SystemExit("the pooled open did not take a warm sandbox")
                await sandbox.close()
    return times


async def _opening(sessions: LocalSessions, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sandbox = await sessions.open(OpenOptions(ttl=60))
        times.append((time.perf_counter() - start) * 1000)
        await sandbox.close()
    return times


async def _round_trips(sessions: LocalSessions, runs: int) -> dict[str, list[float]]:
    """Host and session interleaved, so a busy machine slows each alike; then a fresh sandbox (of
    the sessions' isolation) apart: the teardown of one would land on the host's next run."""
    provider = LocalSandboxProvider(isolation=sessions.provider.isolation, timeout=30)
    times: dict[str, list[float]] = {"host": [], "session": [], "fresh": []}
    async with await sessions.open(OpenOptions(ttl=600)) as sandbox:
        await sandbox.commands.run(COMMAND)  # the first connection
        for _ in range(runs):
            times["host"].append(await _ms(lambda: asyncio.to_thread(subprocess.run, COMMAND, check=True)))
            times["session"].append(await _ms(lambda: sandbox.commands.run(COMMAND)))
        for _ in range(runs):
            times["fresh"].append(await _ms(lambda: provider.run_command(COMMAND)))
    return times


def _sdk_runner(url: str, session_id: str) -> tuple[Callable[[], object], Callable[[], None]] | None:
    """The SDK's ``commands.run`` against the router, and its closer; None without the SDK."""
    if importlib.util.find_spec("k8s_agent_sandbox") is None:
        return None
    import kubernetes  # optional: the benchmark runs without the SDK
    from k8s_agent_sandbox.k8s_helper import K8sHelper
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
    from k8s_agent_sandbox.sandbox import Sandbox

    class Routed(Sandbox):
        def get_pod_ip(self) -> str | None:  # no pod: no per-request Kubernetes lookup
            return None

    api: Any = kubernetes.client.ApiClient()  # the SDK's own (untyped) client, never used here
    config = SandboxDirectConnectionConfig(api_url=url, extra_headers={"Authorization": f"Bearer {TOKEN.reveal()}"})
    sdk = Routed(claim_name=session_id, sandbox_id=session_id, connection_config=config, k8s_helper=K8sHelper(api))

    def close() -> None:
        sdk.close_connection()
        api.close()

    def run() -> object:
        commands = sdk.commands
        assert commands is not None, "the SDK closed its connection"
        return commands.run(" ".join(COMMAND))

    return run, close


async def _through_router(sessions: LocalSessions, runs: int) -> dict[str, list[float]]:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(serve("127.0.0.1", 0, TOKEN, ready=ready.set_result, sessions=sessions))
    times: dict[str, list[float]] = {"socket": [], "router": [], "sdk": []}
    try:
        url = await ready
        async with RemoteSessions(url, token=TOKEN) as remote:
            routed = await remote.open(OpenOptions(ttl=600))
            direct = await sessions.connect(routed.id)
            sdk = _sdk_runner(url, routed.id)
            try:
                for _ in range(runs + 1):  # the first round warms the connections
                    times["socket"].append(await _ms(lambda: direct.commands.run(COMMAND)))
                    times["router"].append(await _ms(lambda: routed.commands.run(COMMAND)))
                    if sdk is not None:
                        times["sdk"].append(await _ms(lambda: asyncio.to_thread(sdk[0])))
            finally:
                if sdk is not None:
                    sdk[1]()
                await direct.disconnect()
                await routed.close()
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
    return {name: values[1:] for name, values in times.items()}


async def _at_once(sessions: LocalSessions, count: int) -> tuple[list[float], list[str]]:
    """``count`` sessions opened at once, then one command in each, all at once: each command's time,
    and every error (by type) of an open, a command or a close."""
    opened = await asyncio.gather(*(sessions.open(OpenOptions(ttl=600)) for _ in range(count)), return_exceptions=True)
    handles = [h for h in opened if not isinstance(h, BaseException)]
    problems = [type(h).__name__ for h in opened if isinstance(h, BaseException)]

    async def one(sandbox: AsyncSandbox) -> float:
        start = time.perf_counter()
        result = await sandbox.commands.run(COMMAND)
        if result.exit_code != 0:
            raise RuntimeError(f"exit {result.exit_code}")
        return (time.perf_counter() - start) * 1000

    try:
        ran = await asyncio.gather(*(one(h) for h in handles), return_exceptions=True)
    finally:
        closed = await asyncio.gather(*(h.close() for h in handles), return_exceptions=True)
    problems += [type(r).__name__ for r in [*ran, *closed] if isinstance(r, BaseException)]
    return [r for r in ran if isinstance(r, float)], problems


async def _idle_pss(sessions: LocalSessions, count: int) -> float:
    handles = [await sessions.open(OpenOptions(ttl=600)) for _ in range(count)]
    try:
        await asyncio.sleep(0.5)
        total = sum(_pss_kib(pid) for h in handles for pid in sessions.host_pids(h.id))
    finally:
        for handle in handles:
            await handle.close()
    return total / count / 1024


def _floor_bundle(directory: str) -> str:
    """A bundle of ``true`` with the least spec (the host root read-only, ``/proc``, fresh
    namespaces) in the fresh ``directory``; its path."""
    os.mkdir(os.path.join(directory, "state"))
    spec = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": COMMAND, "cwd": "/", "env": ["PATH=/usr/bin:/bin"]},
        "root": {"path": "/", "readonly": True},
        "hostname": "floor",
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": kind} for kind in ("pid", "network", "ipc", "uts", "mount")]},
    }
    Path(directory, "config.json").write_text(json.dumps(spec))
    return directory


async def _runsc_true_once(runsc: str, bundle: str) -> float:
    """The floor of a gVisor open: ``runsc run`` of ``bundle`` with the flags ironflow gives runsc
    that any sandbox needs here."""
    flags = ("--rootless", "--ignore-cgroups", "--network=none", "--root", os.path.join(bundle, "state"))
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        runsc, *flags, "run", "--bundle", bundle, f"floor-{os.path.basename(bundle)}",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"runsc run true failed (exit {proc.returncode}): {err.decode(errors='replace')[-500:]}")
    return (time.perf_counter() - start) * 1000


async def _gvisor(state: str, runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Opening (beside ``runsc run true``, interleaved) and round trips of gVisor sessions (the
    result's keys, the table's p50 rows); ``nan`` without runsc."""
    runsc = shutil.which("runsc")
    if runsc is None:
        keys = ("gvisor_open_p50_ms", "gvisor_open_floor_p50_ms", "gvisor_open_over_floor")
        return dict.fromkeys((*keys, "gvisor_rtt_added_ms", "gvisor_vs_fresh_speedup"), math.nan), {}
    opening: list[float] = []
    floor: list[float] = []
    async with LocalSessions(LocalSandboxProvider(isolation="gvisor"), state_dir=state) as sessions:
        for index in range(runs):
            bundle = _floor_bundle(tempfile.mkdtemp(prefix=f"floor{index}-", dir=state))
            floor.append(await _runsc_true_once(runsc, bundle))
            opening += await _opening(sessions, 1)
        trips = await _round_trips(sessions, runs)
    p50 = {name: statistics.median(values) for name, values in trips.items()}
    result = {
        "gvisor_open_p50_ms": statistics.median(opening),
        "gvisor_open_floor_p50_ms": statistics.median(floor),
        "gvisor_open_over_floor": statistics.median(opening) / statistics.median(floor),
        "gvisor_rtt_added_ms": p50["session"] - p50["host"],
        "gvisor_vs_fresh_speedup": p50["fresh"] / p50["session"],
    }
    rows = {
        "gVisor: subprocess.run on the host (its run)": p50["host"],
        "gVisor: in an open session (socket)": p50["session"],
        "gVisor: fresh run_command": p50["fresh"],
        "gVisor: runsc run true (open floor)": result["gvisor_open_floor_p50_ms"],
        "gVisor: open a session": result["gvisor_open_p50_ms"],
    }
    return result, rows


async def main(runs: int, idle: int, at_once: int) -> None:
    if shutil.which("bwrap") is None:
        raise SystemExit("bubblewrap is not installed")
    state = tempfile.mkdtemp(prefix="ifs-bench-")
    try:
        opening = await _opening_compared(state, runs)
        async with LocalSessions(LocalSandboxProvider(), state_dir=state) as sessions:
            trips = await _round_trips(sessions, runs)
            pss = await _idle_pss(sessions, idle)
            crowd, crowd_errors = await _at_once(sessions, at_once)
        # serve closes these sessions
        routed = await _through_router(LocalSessions(LocalSandboxProvider(), state_dir=state), runs)
        gvisor, gvisor_rows = await _gvisor(state, runs)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    p50 = {name: statistics.median(values) for name, values in {**trips, **routed}.items() if values}
    opened = {name: statistics.median(values) for name, values in opening.items()}
    result = {
        "open_p50_ms": opened["cold"],
        "open_floor_p50_ms": opened["floor"],
        "open_over_floor": opened["cold"] / opened["floor"],
        "pool_open_p50_ms": opened["pooled"],
        "rtt_added_ms": p50["session"] - p50["host"],
        "vs_fresh_speedup": p50["fresh"] / p50["session"],
        "sdk_added_ms": p50["sdk"] - p50["router"] if "sdk" in p50 else math.nan,
        "router_added_ms": p50["router"] - p50["socket"],
        "idle_pss_mib": pss,
        "at_once_errors": float(len(crowd_errors)),
        "at_once_p99_over_p50": _p99(crowd) / statistics.median(crowd) if crowd else math.nan,
        **gvisor,
    }
    print(f"{'case':<44} {'p50 ms':>8}   ({runs} runs each, `{' '.join(COMMAND)}`)")
    for name, label in (
        ("host", "subprocess.run on the host"),
        ("session", "in an open session (socket)"),
        ("fresh", "fresh LocalSandboxProvider.run_command"),
        ("socket", "ironflow client on the socket (router run)"),
        ("router", "ironflow client through sandbox serve"),
        ("sdk", "upstream SDK through sandbox serve"),
    ):
        print(f"{label:<44} {p50.get(name, math.nan):>8.2f}")
    print(f"{'bubblewrap + python -c pass (open floor)':<44} {opened['floor']:>8.2f}")
    print(f"{'open a session, cold':<44} {opened['cold']:>8.2f}   ({result['open_over_floor']:.2f}x the floor)")
    print(f"{'session open from the pool':<44} {opened['pooled']:>8.2f}")
    for label, value in gvisor_rows.items():
        print(f"{label:<44} {value:>8.2f}")
    added, ratio = result["rtt_added_ms"], p50["session"] / p50["host"]
    print(f"command in an open session vs subprocess.run: +{added:.2f} ms ({ratio:.2f}x the host's p50)")
    if crowd:
        p50_crowd, p99_crowd = statistics.median(crowd), _p99(crowd)
        print(
            f"{at_once} sessions opened at once, then one command each (at once): "
            f"p50 {p50_crowd:.2f} ms, p99 {p99_crowd:.2f} ms ({p99_crowd / p50_crowd:.2f}x the p50), "
            f"{len(crowd_errors)} errors {sorted(set(crowd_errors))}"
        )
    print(f"idle session PSS with {idle} open: {pss:.2f} MiB")
    for key, limit in TARGETS.items():
        verdict = "skipped" if math.isnan(result[key]) else "met" if result[key] <= limit else "MISSED"
        print(f"target {key} <= {limit:g}: {verdict} ({result[key]:.2f})")
    crowd_ok = result["at_once_errors"] == 0 and result["at_once_p99_over_p50"] <= TARGET_AT_ONCE_P99_OVER_P50
    print(
        f"target {at_once} at once: no error, p99 <= {TARGET_AT_ONCE_P99_OVER_P50:g}x p50: "
        f"{'met' if crowd_ok else 'MISSED'}"
    )
    speedup = result["vs_fresh_speedup"]
    print(f"target vs_fresh_speedup >= {TARGET_SPEEDUP:g}: {'met' if speedup >= TARGET_SPEEDUP else 'MISSED'}")
    print("RESULT " + " ".join(f"{key}={value:.2f}" for key, value in result.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per case (default 30)")
    parser.add_argument("--idle", type=int, default=10, help="idle sessions open for the memory figure (default 10)")
    parser.add_argument(
        "--at-once", type=int, default=50, help="sessions opened at once, one command each (default 50)"
    )
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.idle, args.at_once))
