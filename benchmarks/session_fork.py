"""What a local session's snapshot, fork and pause cost, beside their floors measured in the same run.

A bubblewrap session opened with a 100 MB workspace (``--files`` files of random bytes, in
directories of 50); each case interleaved with its floor, so a busy machine slows both alike:

- ``fork`` (``LocalSessions.fork``, count 1: the parent frozen, its files copied, a new sandbox
  started and ready) p50, against ``cp -a`` of the same tree p50; and the same fork from a full
  pool (``PoolPolicy(1, workspaces=1)``: a warm sandbox with its empty workspace bound, filled at
  hand-out), in the same runs;
- ``snapshot`` (``LocalSessions.snapshot``: the parent frozen, its files scanned and copied into
  the store) p50, against ``tar -cf`` of the same tree p50;
- a pause then resume round trip (``LocalSessions.pause`` + ``resume``: the cgroup freezer here,
  SIGSTOP where there is none) p50, and a command's round trip right after a resume.

    python benchmarks/session_fork.py [--runs 7] [--mb 100] [--files 400]

Targets: fork (cold and from the pool) <= 1x ``cp -a`` and <= 0.5 s; snapshot <= 1x ``tar``; pause/resume <= 50 ms.
Copy-on-write (a reflink by ``copy_file_range``) happens where the filesystem has it (btrfs, XFS);
the line says which filesystem the tree was on. Last line:
``RESULT fork_p50_ms=… cp_a_p50_ms=… fork_over_cp=… pool_fork_p50_ms=… pool_fork_over_cp=… snapshot_p50_ms=…
tar_p50_ms=… snapshot_over_tar=… pause_resume_p50_ms=… cgroup_freezer=…`` (``cgroup_freezer``: 1 when the
cgroup freezer paused the session, 0 when SIGSTOP did; the filesystem is on the line above it)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.local.sessions.snapshots import SnapshotStore
from ironflow.sessions import OpenOptions, PoolPolicy
from ironflow.workspaces import Workspace


def _tree(root: Path, mb: int, files: int) -> None:
    size = mb * 1_000_000 // files
    for n in range(files):
        directory = root / f"d{n // 50}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.bin").write_bytes(os.urandom(size))


def _filesystem(path: Path) -> str:
    done = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


async def _ms(action: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await action()
    return (time.perf_counter() - start) * 1000


def _shell_ms(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True)
    return (time.perf_counter() - start) * 1000


async def main(runs: int, mb: int, files: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ifs-bench-", dir=os.environ.get("TMPDIR", "/var/tmp")) as work:
        base = Path(work)
        tree = base / "tree"
        _tree(tree, mb, files)
        store = SnapshotStore(str(base / "store"), limit_bytes=(runs + 4) * mb * 2_000_000)
        times: dict[str, list[float]] = {
            name: [] for name in ("fork", "pool_fork", "cp", "snapshot", "tar", "pause", "after")
        }
        state = tempfile.mkdtemp(prefix="ifs-b-")
        try:
            sessions = LocalSessions(LocalSandboxProvider(), state_dir=state, snapshot_store=store)
            policy = PoolPolicy(1, workspaces=1)
            pooled = LocalSessions(LocalSandboxProvider(), state_dir=state, snapshot_store=store, pool=policy)
            async with sessions, pooled:
                parent = await sessions.open(OpenOptions(ttl=3600, workspace=Workspace(str(tree))))
                await parent.commands.run(["true"])
                pooled_parent = await pooled.open(OpenOptions(ttl=3600, workspace=Workspace(str(tree))))
                assert pooled.workspace_pool is not None
                for run in range(runs):
                    await pooled.workspace_pool.full()  # no start of the pool's beside any figure
                    copy = base / f"cp{run}"
                    times["cp"].append(_shell_ms(["cp", "-a", str(tree), str(copy)]))
                    shutil.rmtree(copy)
                    times["fork"].append(await _forked_ms(sessions, parent.id))
                    await pooled.workspace_pool.full()
                    times["pool_fork"].append(await _forked_ms(pooled, pooled_parent.id))
                    await pooled.workspace_pool.full()

                    archive = base / f"t{run}.tar"
                    times["tar"].append(_shell_ms(["tar", "-cf", str(archive), "-C", str(tree), "."]))
                    archive.unlink()
                    start = time.perf_counter()
                    taken = await sessions.snapshot(parent.id)
                    times["snapshot"].append((time.perf_counter() - start) * 1000)
                    await sessions.remove_snapshot(taken.id)

                async def round_trip() -> None:
                    await sessions.pause(parent.id)
                    await sessions.resume(parent.id)

                for _ in range(runs * 5):
                    times["pause"].append(await _ms(round_trip))
                    times["after"].append(await _ms(lambda: parent.commands.run(["true"])))
                await parent.disconnect()
                freezer = "cgroup" if sessions.host_pids(parent.id) and _has_freezer(sessions, parent.id) else "sigstop"
        finally:
            shutil.rmtree(state, ignore_errors=True)
        p50 = {name: statistics.median(values) for name, values in times.items()}
        fs = _filesystem(tree)
    print(
        f"{mb} MB in {files} files on {fs}, {runs} runs: fork {p50['fork']:.0f} ms, from the pool "
        f"{p50['pool_fork']:.0f} ms, vs cp -a {p50['cp']:.0f} ms; "
        f"snapshot {p50['snapshot']:.0f} ms vs tar {p50['tar']:.0f} ms; pause+resume {p50['pause']:.1f} ms "
        f"({freezer}), a command after it {p50['after']:.1f} ms"
    )
    print(
        f"RESULT fork_p50_ms={p50['fork']:.1f} cp_a_p50_ms={p50['cp']:.1f} "
        f"fork_over_cp={p50['fork'] / p50['cp']:.2f} pool_fork_p50_ms={p50['pool_fork']:.1f} "
        f"pool_fork_over_cp={p50['pool_fork'] / p50['cp']:.2f} snapshot_p50_ms={p50['snapshot']:.1f} "
        f"tar_p50_ms={p50['tar']:.1f} snapshot_over_tar={p50['snapshot'] / p50['tar']:.2f} "
        f"pause_resume_p50_ms={p50['pause']:.2f} cgroup_freezer={int(freezer == 'cgroup')}"
    )


async def _forked_ms(sessions: LocalSessions, parent_id: str) -> float:
    """One fork of ``parent_id``, timed until it is up; then closed (untimed)."""
    start = time.perf_counter()
    forked = await sessions.fork(parent_id)
    took = (time.perf_counter() - start) * 1000
    for handle in forked:
        await handle.close()
    return took


def _has_freezer(sessions: LocalSessions, session_id: str) -> bool:
    return sessions._activity[session_id].freezer.method == "cgroup freezer"  # a figure's label only


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per case (default 7)")
    parser.add_argument("--mb", type=int, default=100, help="the workspace's size in MB (default 100)")
    parser.add_argument("--files", type=int, default=400, help="how many files it holds (default 400)")
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.mb, args.files))
