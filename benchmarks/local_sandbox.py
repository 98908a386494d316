"""What the local sandbox adds to a short command: bare, under bubblewrap, under gVisor, under Docker.

The same command (``true``) runs ``--runs`` times each way, interleaved, through the same
asyncio subprocess path; the sandboxed cases go through ``LocalSandboxProvider.run_command``
(argv rendering, temp dir, fresh namespaces, teardown included). A case whose runtime is
missing is reported as skipped. bubblewrap's case has two floors measured in the same run: bubblewrap
started straight from ``asyncio`` with ironflow's own argv (its flags, gate and seccomp fd, as the
sandbox's host uid; no cgroup, no rlimit, no temp dir), and a minimal bubblewrap (``--ro-bind / /``,
``--dev``, ``--proc``, ``--unshare-all``). With ``--docker`` (a daemon at ``DOCKER_HOST`` holding the runner
image), Docker's case has a peer measured in the same run: a plain ``docker run --rm --network none``
of the same image and command, so what ironflow adds to Docker's own start is a ratio to it.

    python benchmarks/local_sandbox.py [--runs 20] [--docker]

Targets: bubblewrap adds at most 30 ms, takes at most 1.3 times bubblewrap with ironflow's own flags
and at most 2 times a minimal bubblewrap; ironflow's Docker sandbox takes at most 1.5 times a plain
``docker run``. Last line: ``RESULT bwrap_added_ms=… gvisor_added_ms=… bwrap_vs_own_flags=…
bwrap_vs_minimal=…`` (``nan`` when skipped), and with ``--docker`` ``docker_vs_plain=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import statistics
import time

from ironflow.local.sandbox import argv as sandbox_argv
from ironflow.local.sandbox import environment
from ironflow.local.sandbox_provider import LocalSandboxProvider

COMMAND = ["true"]
TARGET_BWRAP_ADDED_MS = 30.0
TARGET_DOCKER_RATIO = 1.5
TARGET_OWN_FLAGS_RATIO = 1.3
TARGET_MINIMAL_RATIO = 2.0
#: The least bubblewrap that starts a process in new namespaces.
MINIMAL_BWRAP = (
    "bwrap",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--unshare-all",
    "--die-with-parent",
)


async def _bare_once() -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *COMMAND, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    await proc.communicate()
    return (time.perf_counter() - start) * 1000


async def _minimal_bwrap_once() -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *MINIMAL_BWRAP, *COMMAND, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"the minimal bubblewrap failed: {err.decode(errors='replace').strip()}")
    return (time.perf_counter() - start) * 1000


async def _own_flags_once(provider: LocalSandboxProvider) -> float:
    """ironflow's own bubblewrap argv, started as its sandbox's host uid with its gate opened at once:
    the argv's cost without the launch path's (cgroup, rlimits, temp dir, teardown)."""
    shape = provider.shape()
    env = environment.sandbox_env(dict(provider.env))
    start = time.perf_counter()
    with sandbox_argv.sandbox_fds("bwrap", env) as fds:
        argv, _ = sandbox_argv.render(
            shape, tuple(COMMAND), tmp=None, working_dir=None, mounts=(), proxy_socket=None, env=env, fds=fds
        )
        uid = shape.host_uid
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=fds.inherited,
            user=uid,
            group=uid,
            extra_groups=None if uid is None else [],
        )
        assert fds.gate is not None
        fds.gate.release()
        _, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bubblewrap with ironflow's flags failed: {err.decode(errors='replace').strip()}")
    return (time.perf_counter() - start) * 1000


async def _plain_docker_once(image: str) -> float:
    """The peer: the daemon's own start and removal of a container, nothing of ironflow."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "docker", "run", "--rm", "--pull=never", "--network", "none", "--entrypoint", COMMAND[0], image,
        *COMMAND[1:], stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"plain docker run failed: {err.decode(errors='replace').strip()}")
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
    if "docker" in providers:
        times["plain docker run"] = []
    if "bwrap" in providers:
        times["bwrap, ironflow's flags"] = []
        times["minimal bwrap"] = []
    for _ in range(runs):
        times["bare"].append(await _bare_once())
        if "bwrap" in providers:
            times["bwrap, ironflow's flags"].append(await _own_flags_once(providers["bwrap"]))
            times["minimal bwrap"].append(await _minimal_bwrap_once())
        for isolation, provider in providers.items():
            times[isolation].append(await _sandboxed_once(provider))
            if isolation == "docker" and provider.docker_image is not None:
                times["plain docker run"].append(await _plain_docker_once(provider.docker_image))
    return times


async def main(runs: int, docker: bool) -> None:
    available = [i for i, binary in (("bwrap", "bwrap"), ("gvisor", "runsc")) if shutil.which(binary) is not None]
    times = await _measure(runs, [*available, *(["docker"] if docker else [])])
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
    floors = {"own": math.nan, "minimal": math.nan}
    if "bwrap" in times:
        for key, name in (("own", "bwrap, ironflow's flags"), ("minimal", "minimal bwrap")):
            floor = statistics.median(times[name])
            rows.append((f"{name} (floor)", floor, floor - bare))
            floors[key] = statistics.median(times["bwrap"]) / floor
    ratio = math.nan
    if docker:
        plain, ours = statistics.median(times["plain docker run"]), statistics.median(times["docker"])
        rows += [("plain docker run (peer)", plain, plain - bare), ("docker", ours, ours - bare)]
        ratio = ours / plain
    else:
        rows.append(("docker (skipped: no --docker)", math.nan, math.nan))
    print(f"{'case':<34} {'median ms':>10} {'added ms':>10}   ({runs} runs each, `{' '.join(COMMAND)}`)")
    for name, median, extra in rows:
        print(f"{name:<34} {median:>10.2f} {extra:>10.2f}")
    verdict = "met" if added["bwrap"] <= TARGET_BWRAP_ADDED_MS else "MISSED"
    print(f"target: bubblewrap adds <= {TARGET_BWRAP_ADDED_MS:g} ms: {verdict}")
    for key, limit, name in (
        ("own", TARGET_OWN_FLAGS_RATIO, "bubblewrap with ironflow's own flags"),
        ("minimal", TARGET_MINIMAL_RATIO, "a minimal bubblewrap"),
    ):
        verdict = "met" if floors[key] <= limit else "MISSED"
        print(f"target: the bubblewrap sandbox takes <= {limit:g} x {name} ({floors[key]:.2f}): {verdict}")
    if docker:
        verdict = "met" if ratio <= TARGET_DOCKER_RATIO else "MISSED"
        print(
            f"target: the docker sandbox takes <= {TARGET_DOCKER_RATIO:g} x a plain docker run ({ratio:.2f}): {verdict}"
        )
    result = f"bwrap_added_ms={added['bwrap']:.2f} gvisor_added_ms={added['gvisor']:.2f}"
    result += f" bwrap_vs_own_flags={floors['own']:.2f} bwrap_vs_minimal={floors['minimal']:.2f}"
    print(f"RESULT {result}" + (f" docker_vs_plain={ratio:.2f}" if docker else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per case (default 20)")
    parser.add_argument("--docker", action="store_true", help="also Docker (DOCKER_HOST, the runner image loaded)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.docker))
