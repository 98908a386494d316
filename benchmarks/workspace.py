"""What a workspace costs: the copy a step is given and the diff it gives back, against ``cp -a`` and git.

A synthetic repository is built from a fixed seed in a temp dir (removed at the end):
``--files`` files, ``--megabytes`` in all, mostly small text files in nested directories and
a few larger binary files, some executable. One run measures, each pair interleaved (their
order alternating) so a busy machine slows both sides alike, p50 over ``--runs``, with the page
cache warm and dirty pages written out (``sync``) before each timed case:

- ready: ``ironflow.local.workspaces.copies.prepare``, what the local provider calls (the source's
  walk, ``cp -a --reflink=auto``, the copy's snapshot; on a root worker the copy given to the
  sandbox's uid), against ``cp -a`` of the same tree into a fresh directory of the same temp
  dir the provider uses. Whether the filesystem has reflinks is tried first, with
  ``cp --reflink=always`` of one file there; where it has them, ``cp -a`` reflinks too
  (coreutils 9 made it the default), and the 0.5x target is against a copy of every byte,
  ``cp -a --reflink=never``, what ``cp -a`` did before;
- diff: after a 10-file change to the copy (7 text files modified, 1 binary file modified,
  1 added, 1 deleted), ``collect`` (the copy's walk, the hashing, the patch) against
  ``git diff --binary`` in a host git repository of the same tree with the same change in its
  working tree: committed and its index refreshed (``git status``) beforehand, as a user's
  repository is, the added file ``git add -N``'d so that git shows it. Both must touch the same
  paths;
- end to end: ``LocalSandboxProvider().run_command(["true"], workspace=Workspace(tree))``
  (``nan`` without bubblewrap), and the same under gVisor, the two interleaved
  (``nan`` without ``runsc``, or on a non-root worker, where gVisor takes no workspace). The
  copy and the diff are the same code under both runtimes: only the sandbox differs.

    python benchmarks/workspace.py [--files 10000] [--megabytes 200] [--runs 5]

Targets: the workspace ready <= 2x ``cp -a`` (<= 0.5x where the filesystem has reflinks), the
diff <= 1.5x ``git diff --binary``. Last line:
``RESULT ready_vs_cp=… diff_vs_git=… reflink=… ready_ms=… cp_ms=… collect_ms=… git_diff_ms=… end_to_end_ms=…
end_to_end_gvisor_ms=… gvisor_vs_bwrap=…``
(``reflink`` 1 when the filesystem has them, else 0).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import os
import posixpath
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ironflow.local import workdirs
from ironflow.local.sandbox import identity
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.workspaces import copies as local_workspaces
from ironflow.workspaces import Workspace, WorkspaceChanges

T = TypeVar("T")

SEED = 20240611
TARGET_READY = 2.0
TARGET_READY_REFLINK = 0.5
TARGET_DIFF = 1.5
BINARY_SHARE = 0.6  # of the bytes: a few large assets hold most of a repository's size
FILES_PER_DIR = 24
MAX_DEPTH = 6
MAX_TEXT_BYTES = 64 * 1024
WORDS = ("def", "return", "self", "import", "from", "class", "value", "result", "error", "path", "file",
         "config", "step", "sandbox", "workspace", "copy", "patch", "diff", "tree", "index", "object", "commit",
         "if", "else", "for", "while", "in", "not", "and", "or", "None", "True", "False")  # fmt: skip
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


@dataclass(frozen=True)
class Plan:
    """The synthetic tree (relative paths), and the 10-file change made to it."""

    text: tuple[str, ...]
    binary: tuple[str, ...]
    modified_text: tuple[str, ...]
    modified_binary: str
    added: str
    deleted: str

    @property
    def changed(self) -> list[str]:
        return sorted({*self.modified_text, self.modified_binary, self.added, self.deleted})


def _text_pool(rng: random.Random, size: int) -> bytes:
    """Code-like lines to cut text files from (building each file word by word is slow)."""
    lines: list[str] = []
    total = 0
    while total < size:
        line = "    " * rng.randrange(4) + " ".join(rng.choices(WORDS, k=rng.randrange(2, 12))) + "\n"
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()


def _directories(rng: random.Random, count: int) -> list[str]:
    """Nested directories: each under a random earlier one, at most ``MAX_DEPTH`` deep."""
    dirs = [""]
    for i in range(count):
        parent = rng.choice(dirs)
        if parent.count("/") + 1 >= MAX_DEPTH:
            parent = ""
        dirs.append(f"{parent}/d{i:04d}".lstrip("/"))
    return dirs


def _sizes(rng: random.Random, files: int, total: int) -> tuple[list[int], list[int]]:
    """Text sizes (log-normal around 2 KiB, capped) and binary sizes filling the rest of ``total``."""
    binaries = max(2, files // 200)
    text = [min(MAX_TEXT_BYTES, max(16, int(rng.lognormvariate(math.log(2048), 1.0)))) for _ in range(files - binaries)]
    budget = int(total * (1 - BINARY_SHARE))
    if sum(text) > budget:
        scale = budget / sum(text)
        text = [max(16, int(s * scale)) for s in text]
    rest = max(binaries * 1024, total - sum(text))
    weights = [rng.uniform(0.2, 1.0) for _ in range(binaries)]
    return text, [max(1024, int(rest * w / sum(weights))) for w in weights]


def build(root: Path, files: int, megabytes: int) -> Plan:
    """The synthetic repository at ``root``, the same for the same arguments."""
    rng = random.Random(SEED)
    text_sizes, binary_sizes = _sizes(rng, files, megabytes * 1024 * 1024)
    dirs = _directories(rng, max(1, files // FILES_PER_DIR))
    pool = _text_pool(rng, 2 * MAX_TEXT_BYTES)
    text: list[str] = []
    binary: list[str] = []
    for i, size in enumerate(text_sizes):
        rel = f"{rng.choice(dirs)}/src_{i:05d}.{rng.choice(('py', 'md', 'txt', 'json', 'c'))}".lstrip("/")
        start = rng.randrange(len(pool) - size)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"# {rel}\n".encode() + pool[start : start + size])
        if rng.random() < 0.02:
            path.chmod(0o755)
        text.append(rel)
    for i, size in enumerate(binary_sizes):
        rel = f"{rng.choice(dirs)}/asset_{i:04d}.bin".lstrip("/")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0BIN" + rng.randbytes(size - 4))
        binary.append(rel)
    picked = rng.sample(text, 8)
    added = posixpath.join(posixpath.dirname(picked[0]), "added_by_step.txt")
    return Plan(tuple(text), tuple(binary), tuple(picked[:7]), rng.choice(binary), added, picked[7])


def change(root: Path, plan: Plan) -> None:
    """The 10-file change, the same bytes wherever it is made."""
    for rel in plan.modified_text:
        path = root / rel
        lines = path.read_bytes().splitlines(keepends=True)
        lines.insert(len(lines) // 2, b"changed by the step\n")
        path.write_bytes(b"".join(lines) + b"one more line\n")
    with open(root / plan.modified_binary, "r+b") as f:
        f.seek(os.fstat(f.fileno()).st_size // 2)
        f.write(bytes(range(256)) * 16)
    (root / plan.added).write_bytes(b"a file the step wrote\n" * 40)
    (root / plan.deleted).unlink()


def _git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "gc.auto=0", *args],  # no gc left running in the background
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        check=True,
    ).stdout


def host_repo(source: Path, repo: Path, plan: Plan) -> None:
    """A user's repository of the tree: committed, its stat cache fresh, then changed."""
    subprocess.run(["cp", "-a", "--no-target-directory", str(source), str(repo)], check=True)
    time.sleep(1.1)  # every file older than the index by a second: none racily clean
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-q", "-m", "tree")
    _git(repo, "status", "--porcelain")  # the index refreshed, as a user's repository has it
    change(repo, plan)
    _git(repo, "add", "-N", plan.added)


def _timed(action: Callable[[], T]) -> tuple[float, T]:
    os.sync()  # the last case's writes do not land on this one
    start = time.perf_counter()
    out = action()
    return (time.perf_counter() - start) * 1000, out


def reflinks_possible(directory: str) -> bool:
    """Whether ``cp --reflink=always`` works in ``directory``'s filesystem."""
    probe = tempfile.mkdtemp(prefix="ifw-reflink-", dir=directory)
    try:
        Path(probe, "a").write_bytes(b"reflink probe\n")
        done = subprocess.run(["cp", "--reflink=always", f"{probe}/a", f"{probe}/b"], capture_output=True, check=False)
        return done.returncode == 0
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def measure_ready(source: Path, runs: int, sandbox_uid: int | None, cp_argv: list[str]) -> dict[str, list[float]]:
    """``prepare`` and ``cp_argv``, each into a fresh run dir of the provider's temp dir."""
    spec = Workspace(str(source))
    times: dict[str, list[float]] = {"ready": [], "cp": []}

    def ready(run_dir: str) -> object:
        return local_workspaces.prepare(spec, run_dir, sandbox_uid=sandbox_uid)

    def cp(run_dir: str) -> object:
        dest = os.path.join(run_dir, "copy")
        return subprocess.run([*cp_argv, "--no-target-directory", str(source), dest], check=True)

    for i in range(runs):
        for name, action in sorted({"ready": ready, "cp": cp}.items(), reverse=i % 2 == 1):
            with workdirs.run_dir(None) as run_dir:
                took, _ = _timed(functools.partial(action, run_dir))
                times[name].append(took)
    return times


def _patch_paths(patch: bytes) -> list[str]:
    return sorted(line.split(b" b/", 1)[1].decode() for line in patch.splitlines() if line.startswith(b"diff --git a/"))


def _abbreviated(patch: bytes) -> bytes:
    """The patch with each ``index`` line's ids cut to 7 digits, as ``git diff`` shows a text file's."""
    return re.sub(rb"(?m)^index ([0-9a-f]{7})[0-9a-f]*\.\.([0-9a-f]{7})[0-9a-f]*", rb"index \1..\2", patch)


def measure_diff(source: Path, repo: Path, plan: Plan, runs: int, sandbox_uid: int | None) -> dict[str, list[float]]:
    """``collect`` on a changed copy, and ``git diff --binary`` on the same change; each ``collect``
    starts as a run's does, with no object store yet (removed untimed)."""
    times: dict[str, list[float]] = {"collect": [], "git": []}
    with workdirs.run_dir(None) as run_dir:
        prepared = local_workspaces.prepare(Workspace(str(source)), run_dir, sandbox_uid=sandbox_uid)
        change(Path(prepared.copy), plan)
        actions: dict[str, Callable[[], object]] = {
            "collect": lambda: local_workspaces.collect(prepared),
            "git": lambda: _git(repo, "diff", "--binary"),
        }
        outputs: dict[str, object] = {}
        for i in range(-1, runs):  # run -1 warms up each: git's binaries and objects in the page cache
            for name in sorted(actions, reverse=i % 2 == 1):
                shutil.rmtree(prepared.git_dir, ignore_errors=True)
                took, outputs[name] = _timed(actions[name])
                if i >= 0:
                    times[name].append(took)
    changes, git_patch = outputs["collect"], outputs["git"]
    assert isinstance(changes, WorkspaceChanges)
    assert isinstance(git_patch, bytes)
    assert list(changes.changed_paths) == plan.changed, f"collect found {changes.changed_paths}, not {plan.changed}"
    for name, patch in (("collect", changes.patch), ("git diff", git_patch)):
        assert _patch_paths(patch) == plan.changed, f"{name}'s patch touches {_patch_paths(patch)}, not {plan.changed}"
    same = _abbreviated(changes.patch) == _abbreviated(git_patch)
    print(f"the two patches are {'the same' if same else 'DIFFERENT'} (but for git diff's abbreviated index lines)")
    return times


async def measure_end_to_end(source: Path, runs: int, isolations: tuple[Isolation, ...]) -> dict[str, list[float]]:
    """A sandboxed ``true`` with the workspace, per runtime, their order alternating."""
    providers = {isolation: LocalSandboxProvider(isolation=isolation, timeout=300) for isolation in isolations}
    times: dict[str, list[float]] = {isolation: [] for isolation in isolations}
    for i in range(runs):
        for isolation in sorted(isolations, reverse=i % 2 == 1):
            os.sync()
            start = time.perf_counter()
            result = await providers[isolation].run_command(["true"], workspace=Workspace(str(source)))
            times[isolation].append((time.perf_counter() - start) * 1000)
            if result.exit_code != 0 or result.workspace is None or result.workspace.files:
                raise SystemExit(f"the sandboxed `true` failed or changed its workspace: {result.stderr.strip()}")
    return times


def main(files: int, megabytes: int, runs: int) -> None:
    if shutil.which("git") is None:
        raise SystemExit("git is not installed")
    # The provider's rule: a root worker's bubblewrap sandbox runs as the default sandbox uid.
    sandbox_uid = identity.DEFAULT_HOST_UID if os.geteuid() == 0 else None
    scratch = Path(tempfile.mkdtemp(prefix="ifw-bench-"))
    try:
        source = scratch / "tree"
        started = time.perf_counter()
        plan = build(source, files, megabytes)
        host_repo(source, scratch / "repo", plan)
        size = sum(f.stat().st_size for f in source.rglob("*") if f.is_file())
        took = time.perf_counter() - started
        print(f"tree: {files} files, {size / 2**20:.1f} MiB, in {scratch.parent} (built in {took:.1f}s)")
        reflink = reflinks_possible(tempfile.gettempdir())
        cp_argv = ["cp", "-a", "--reflink=never"] if reflink else ["cp", "-a"]
        ready = measure_ready(source, runs, sandbox_uid, cp_argv)
        diff = measure_diff(source, scratch / "repo", plan, runs, sandbox_uid)
        have_bwrap = shutil.which("bwrap") is not None
        have_gvisor = have_bwrap and shutil.which("runsc") is not None and os.geteuid() == 0
        chosen: tuple[Isolation, ...] = ("bwrap", "gvisor") if have_gvisor else ("bwrap",) if have_bwrap else ()
        end_to_end = asyncio.run(measure_end_to_end(source, runs, chosen))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    p50 = {name: statistics.median(values) for name, values in {**ready, **diff}.items()}
    result = {
        "ready_vs_cp": p50["ready"] / p50["cp"],
        "diff_vs_git": p50["collect"] / p50["git"],
        "reflink": 1.0 if reflink else 0.0,
        "ready_ms": p50["ready"],
        "cp_ms": p50["cp"],
        "collect_ms": p50["collect"],
        "git_diff_ms": p50["git"],
        "end_to_end_ms": statistics.median(end_to_end.get("bwrap", [math.nan])),
        "end_to_end_gvisor_ms": statistics.median(end_to_end.get("gvisor", [math.nan])),
    }
    result["gvisor_vs_bwrap"] = result["end_to_end_gvisor_ms"] / result["end_to_end_ms"]
    print(f"{'case':<52} {'p50 ms':>9}   ({runs} runs each)")
    for label, key in (
        (f"{' '.join(cp_argv)} of the tree", "cp_ms"),
        ("workspace ready (local_workspaces.prepare)", "ready_ms"),
        ("git diff --binary in the host repository", "git_diff_ms"),
        ("workspace diff (local_workspaces.collect)", "collect_ms"),
        ("run_command(['true'], workspace=...) end to end" + ("" if have_bwrap else " (no bwrap)"), "end_to_end_ms"),
        ("the same under gVisor" + ("" if have_gvisor else " (no runsc, or not root)"), "end_to_end_gvisor_ms"),
    ):
        print(f"{label:<52} {result[key]:>9.1f}")
    ready_target = TARGET_READY_REFLINK if reflink else TARGET_READY
    print(f"reflinks: {'yes' if reflink else 'no'}: the ready target is <= {ready_target:g}x {' '.join(cp_argv)}")
    for key, limit in (("ready_vs_cp", ready_target), ("diff_vs_git", TARGET_DIFF)):
        print(f"target {key} <= {limit:g}: {'met' if result[key] <= limit else 'MISSED'} ({result[key]:.2f})")
    print("RESULT " + " ".join(f"{key}={value:.2f}" for key, value in result.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10000, help="files in the repository (default 10000)")
    parser.add_argument("--megabytes", type=int, default=200, help="its size in MiB (default 200)")
    parser.add_argument("--runs", type=int, default=5, help="runs per case (default 5)")
    args = parser.parse_args()
    if args.files < 20 or args.megabytes < 1 or args.runs < 1:
        parser.error("--files must be at least 20, --megabytes and --runs at least 1")
    main(args.files, args.megabytes, args.runs)
