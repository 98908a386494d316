"""What a user waits for when typing ``ironflow``: each command's whole process against a Python start.

Each row is a whole ``ironflow …`` process (what the console script runs), wall time from spawn
to exit, with its bytecode cached (every command runs once untimed first); its floor is ``python -c
pass`` with the same interpreter and environment, timed interleaved with the rows (so load from
elsewhere falls on each alike). Rows:

- ``ironflow exec -- true``: a local bubblewrap sandbox, the whole one-shot command;
- ``ironflow --help``: the help tree (no command's module loads);
- ``ironflow runs list``: a SQLite store of 50 runs in a temp dir (``--store``);
- ``ironflow sandbox exec ID -- true``: a session opened with ``ironflow sandbox open`` on an
  ``ironflow sandbox serve`` started here (its own ``XDG_RUNTIME_DIR``, so its token is its own).

    python benchmarks/cli.py [--runs 15]

Targets (issue 31), each a ratio to the floor: exec <= 8x, --help <= 6x, runs list <= 8x,
sandbox exec <= 6x, on wall time. A target missed is printed as missed, never loosened. Each
row's CPU time (user + system) and its ratio to the floor's are printed beside it, and the
machine's load average: on a busy machine the wall ratios grow, the CPU ones much less. Last
line: ``RESULT floor_ms=… exec_ratio=… help_ratio=… runs_list_ratio=… sandbox_exec_ratio=…
targets_met=…`` (``targets_met``: how many of the four; the exec rows are ``nan`` without bubblewrap).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ironflow.engine import model
from ironflow.engine.store import open_store

#: What the console script runs (``python -m ironflow`` is the same); the code's own tree decides.
IRONFLOW = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]
FLOOR = [sys.executable, "-c", "pass"]
#: Row -> (its RESULT key, target ratio to the floor).
TARGETS = {
    "ironflow exec -- true": ("exec_ratio", 8.0),
    "ironflow --help": ("help_ratio", 6.0),
    "ironflow runs list": ("runs_list_ratio", 8.0),
    "ironflow sandbox exec ID -- true": ("sandbox_exec_ratio", 6.0),
}
SEEDED_RUNS = 50


def _ms(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one whole process; a failure stops the
    benchmark naming it. CPU time is what load from elsewhere changes least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"ironflow {' '.join(argv[3:])} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return elapsed, cpu


async def _seed(path: Path) -> None:
    store = open_store(str(path))
    await store.open()
    try:
        for index in range(SEEDED_RUNS):
            status = model.RunStatus.SUCCEEDED if index % 5 else model.RunStatus.FAILED
            run = model.RunRecord(id=model.new_id(), workflow="flows/review.py:review", input={"i": index},
                                  status=status, attempt=1)  # fmt: skip
            await store.create_run(run)
    finally:
        await store.close()


@contextlib.contextmanager
def _session(env: dict[str, str]) -> Iterator[str]:
    """A session id of a ``sandbox serve`` started here; the server is stopped (SIGINT: it closes
    its sessions) when the block ends."""
    server = subprocess.Popen([*IRONFLOW, "sandbox", "serve", "--port", "0"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        url = None
        assert server.stdout is not None
        for line in server.stdout:
            found = re.match(r"serving (http://\S+)", line.strip())
            if found:
                url = found.group(1)
                break
        if url is None:
            raise SystemExit(f"sandbox serve did not start (exit {server.wait()})")
        env["IRONFLOW_SANDBOX_SERVER"] = url
        opened = subprocess.run([*IRONFLOW, "sandbox", "open", "-o", "json"], env=env, capture_output=True,
                                text=True, check=True)  # fmt: skip
        yield str(json.loads(opened.stdout)["id"])
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _rows(runs: int, work: Path, env: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    store = work / "engine.db"
    asyncio.run(_seed(store))
    commands: dict[str, list[str]] = {
        "python -c pass": FLOOR,
        "ironflow --help": [*IRONFLOW, "--help"],
        "ironflow runs list": [*IRONFLOW, "runs", "list", "--store", str(store)],
    }
    with contextlib.ExitStack() as stack:
        if shutil.which("bwrap") is not None:
            commands["ironflow exec -- true"] = [*IRONFLOW, "exec", "--", "true"]
            session = stack.enter_context(_session(env))
            commands["ironflow sandbox exec ID -- true"] = [*IRONFLOW, "sandbox", "exec", session, "--", "true"]
        for argv in commands.values():  # untimed: bytecode written, files in the page cache
            _ms(argv, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(runs):
            for name, argv in commands.items():
                times[name].append(_ms(argv, env))
    return times


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ironflow-bench-cli-") as tmp:
        work = Path(tmp)
        (work / "runtime").mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed command has it
        # ... in the temp dir: nothing is written into the checkout or the environment.
        env.update(PYTHONPYCACHEPREFIX=str(work / "pycache"), XDG_RUNTIME_DIR=str(work / "runtime"))
        env.update(COLUMNS="80", NO_COLOR="1")
        load_before = os.getloadavg()
        times = _rows(runs, work, env)
        load_after = os.getloadavg()
    floor = statistics.median(wall for wall, _ in times["python -c pass"])
    floor_cpu = statistics.median(cpu for _, cpu in times["python -c pass"])
    print(f"{'command':<34} {'p50 ms':>8} {'ratio':>7} {'target':>7}   {'verdict':<8} {'cpu ms':>7} {'ratio':>7}"
          f"   ({runs} runs each, interleaved)")  # fmt: skip
    print(f"{'python -c pass (the floor)':<34} {floor:>8.1f} {1.0:>6.2f}x {'':>7}   {'':<8} {floor_cpu:>7.1f} "
          f"{1.0:>6.2f}x")  # fmt: skip
    ratios: dict[str, float] = {}
    met = 0
    for name, (key, target) in TARGETS.items():
        if name not in times:
            ratios[key] = float("nan")
            print(f"{name:<34} {'skipped: bubblewrap (bwrap) is not installed':>40}")
            continue
        median = statistics.median(wall for wall, _ in times[name])
        cpu = statistics.median(cpu for _, cpu in times[name])
        ratios[key] = median / floor
        verdict = "met" if ratios[key] <= target else "NOT met"
        met += ratios[key] <= target
        print(f"{name:<34} {median:>8.1f} {ratios[key]:>6.2f}x {target:>6.1f}x   {verdict:<8} {cpu:>7.1f} "
              f"{cpu / floor_cpu:>6.2f}x")  # fmt: skip
    print(f"load average (1, 5, 15 min): before {' '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {' '.join(f'{v:.2f}' for v in load_after)}; {os.cpu_count()} CPUs")  # fmt: skip
    fields = " ".join(f"{key}={value:.2f}" for key, value in ratios.items())
    print(f"RESULT floor_ms={floor:.2f} {fields} targets_met={met}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command (default 15)")
    main(parser.parse_args().runs)
