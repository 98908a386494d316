"""Every benchmark still runs: ``benchmarks/*.py`` as a subprocess, with its smallest parameters.

A benchmark is runnable with one command and ends with ``RESULT key=value ...``; nothing else
runs them, so they would rot silently when the code they drive changes. Each case here runs
one with parameters that shorten it (never its defaults) and checks only that it exits 0 and
that its last line is ``RESULT`` with exactly the keys it documents, each a finite number (or
``nan``, where the benchmark documents that for a part this machine lacks).
Speed targets are the benchmarks' business, not asserted here. A benchmark that needs a
part this machine lacks (nginx, wrk, PostgreSQL, bubblewrap, gVisor, the kube-testenv
binaries, the real node, the Temporal CLI, the agent-sandbox SDK, git) is skipped with the
reason; CI installs all of them.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ironflow.testing import images, kubeenv, postgres_server, realnode, temporal_server
from ironflow.testing._kubeenv_bins import find_node_bin_dir

ROOT = Path(__file__).resolve().parents[3]
BENCHMARKS = ROOT / "benchmarks"
INTERRUPT_GRACE_S = 30.0  # after SIGINT, for the benchmark's own cleanup (servers, temp dirs)


@dataclass(frozen=True)
class Bench:
    name: str
    args: tuple[str, ...]
    keys: frozenset[str]
    needs: tuple[str, ...] = ()
    timeout_s: float = 120.0
    #: Keys the benchmark documents as ``nan`` when a part is missing: (key, part) pairs.
    nan_without: tuple[tuple[str, str], ...] = ()


CASES = (
    Bench("agent_sandbox", ("--runs", "2", "--cold-ms", "20", "--parallel", "2", "--pool", "4", "--rounds", "1"),
          frozenset({"cold_ms", "warm_ms", "saved_ms", "requests_per_step", "claims_per_s", "sdk_claims_per_s",
                     "ratio"}), needs=("agent-sandbox-sdk",)),
    Bench("cli", ("--runs", "2"),
          frozenset({"floor_ms", "exec_ratio", "help_ratio", "runs_list_ratio", "sandbox_exec_ratio", "targets_met"}),
          nan_without=(("exec_ratio", "bwrap"), ("sandbox_exec_ratio", "bwrap"))),
    Bench("claude_output", ("--repeat", "1"),
          frozenset({"json_us", "stream_small_us", "stream_10mib_ms", "stream_mb_per_s", "rate_limits_10mib_ms"})),
    Bench("concurrent_steps", ("--sizes", "1,3", "--run-for", "0"),
          frozenset({"requests_per_step", "watch_connections", "rss_kib_per_step"})),
    Bench("egress", ("--decisions", "2000", "--size", "64MiB", "--rounds", "50"),
          frozenset({"decide_p50_us", "decide_p99_us", "vs_target", "floor_p50_us", "vs_floor", "index_ms",
                     "throughput_vs_bare", "cpu_per_gib_vs_bare", "ttfb_added_p50_ms", "tunnel_cpu_vs_bare"})),
    Bench("engine", ("--steps", "20", "--runs-4w", "1", "--steps-4w", "20"),
          frozenset({"sqlite_step_ms", "pg_step_ms", "pg_steps_per_s_4w", "vs_dbos_sqlite", "vs_dbos_pg",
                     "vs_dbos_pg_4w"}), needs=("postgres", "dbos"), timeout_s=240),
    Bench("k8s_sessions", ("--runs", "2"),
          frozenset({"real_apiserver", "open_p50_ms", "exec_p50_ms", "rtt_p50_ms", "boot_added_ms", "rtt_vs_exec",
                     "file_1mib_ms"}), timeout_s=240),
    Bench("kube_informer", ("--sizes", "1,3"),
          frozenset({"shared_watch_connections", "shared_requests_per_wait", "shared_wake_p99_ms",
                     "per_pod_watch_connections"})),
    Bench("local_sandbox", ("--runs", "2"),
          frozenset({"bwrap_added_ms", "gvisor_added_ms", "bwrap_vs_own_flags", "bwrap_vs_minimal"}),
          needs=("bwrap", "runsc")),
    Bench("proxy", ("--seconds", "1", "--workers", "1", "--connections", "8"),
          frozenset({"rps_vs_nginx_memory", "rps_vs_nginx_postgres", "rps_vs_bare_memory", "rps_vs_bare_postgres",
                     "cpu_us_per_request", "p50_added_ms_at_8"}),
          needs=("nginx", "wrk", "postgres"), timeout_s=300),
    Bench("sandbox_sessions", ("--runs", "2", "--idle", "2", "--at-once", "3"),
          frozenset({"open_p50_ms", "open_floor_p50_ms", "open_over_floor", "pool_open_p50_ms", "rtt_added_ms",
                     "vs_fresh_speedup", "sdk_added_ms", "router_added_ms", "idle_pss_mib", "at_once_errors",
                     "at_once_p99_over_p50", "gvisor_open_p50_ms", "gvisor_open_floor_p50_ms",
                     "gvisor_open_over_floor", "gvisor_rtt_added_ms", "gvisor_vs_fresh_speedup"}),
          needs=("bwrap", "runsc", "agent-sandbox-sdk")),
    Bench("session_fork", ("--runs", "2", "--mb", "4", "--files", "20"),
          frozenset({"fork_p50_ms", "cp_a_p50_ms", "fork_over_cp", "pool_fork_p50_ms", "pool_fork_over_cp",
                     "snapshot_p50_ms", "tar_p50_ms", "snapshot_over_tar", "pause_resume_p50_ms",
                     "cgroup_freezer"}), needs=("bwrap",)),
    Bench("real_step_latency", ("--sequential", "1", "--concurrent", "2", "--claims", "1"),
          frozenset({"step_p50_ms", "step_p95_ms", "single_step_p50_ms", "sdk_claim_p50_ms", "cluster_start_s"}),
          needs=("kube-testenv", "agent-sandbox-sdk"), timeout_s=300),
    Bench("real_node", ("--count", "1"),
          frozenset({"runc_ratio", "runc_bare_p50_ms", "runc_ironflow_p50_ms", "gvisor_ratio", "gvisor_bare_p50_ms",
                     "gvisor_ironflow_p50_ms", "runc_agent_ratio", "runc_agent_bare_p50_ms", "runc_agent_p50_ms",
                     "runc_agent_true_ratio", "runc_agent_true_p50_ms", "gvisor_agent_ratio",
                     "gvisor_agent_bare_p50_ms", "gvisor_agent_p50_ms", "gvisor_agent_true_ratio",
                     "gvisor_agent_true_p50_ms", "session_ratio", "session_exec_p50_ms", "session_http_p50_ms",
                     "session_fallback_p50_ms", "session_fallback_ratio", "router_direct_p50_ms", "router_p50_ms",
                     "router_added_ms", "node_start_s", "loadavg_1m"}),
          needs=("real-node",), timeout_s=600),
    Bench("ui", ("--runs", "60", "--requests", "3"),
          frozenset({"runs_page_p50_ms_sqlite", "runs_page_p95_ms_sqlite", "filtered_p50_ms_sqlite",
                     "list_runs_p50_ms_sqlite", "vs_list_runs_sqlite", "runs_page_p50_ms_postgres",
                     "runs_page_p95_ms_postgres", "filtered_p50_ms_postgres", "list_runs_p50_ms_postgres",
                     "vs_list_runs_postgres", "target_met"}), needs=("postgres",), timeout_s=180),
    Bench("temporal", ("--steps", "5"),
          frozenset({"engine_pg_step_ms", "temporal_step_ms", "temporal_bare_step_ms", "ratio"}),
          needs=("postgres", "temporal-cli"), timeout_s=180),
    Bench("workspace", ("--files", "200", "--megabytes", "2", "--runs", "1"),
          frozenset({"ready_vs_cp", "diff_vs_git", "reflink", "ready_ms", "cp_ms", "collect_ms", "git_diff_ms",
                     "end_to_end_ms", "end_to_end_gvisor_ms", "gvisor_vs_bwrap"}), needs=("bwrap", "git"),
          nan_without=(("end_to_end_gvisor_ms", "gvisor-workspaces"), ("gvisor_vs_bwrap", "gvisor-workspaces"))),
)  # fmt: skip

MARKS = {"postgres": pytest.mark.postgres, "bwrap": pytest.mark.bwrap, "runsc": pytest.mark.gvisor}


def _params(with_timeout: bool) -> list[object]:
    return [
        pytest.param(
            case,
            id=case.name,
            marks=[MARKS[n] for n in case.needs if n in MARKS]
            + ([pytest.mark.timeout(case.timeout_s + INTERRUPT_GRACE_S + 30)] if with_timeout else []),
        )
        for case in CASES
    ]


def _real_node_missing() -> str | None:
    try:
        find_node_bin_dir()
    except kubeenv.KubeEnvNotAvailable as exc:
        return str(exc)
    missing = realnode.missing_tools()
    for name in ("runner", "auth-proxy", "worker"):
        if not images.archive_path(ROOT, name).exists():
            missing.append(f"the {name} image (bash scripts/images build {name})")
    return f"the real node needs {', '.join(missing)}" if missing else None


def _missing(part: str) -> str | None:
    """Why ``part`` is unavailable here, or None when it is there."""
    if part == "postgres":
        try:
            postgres_server.find_pg_bin("initdb")
            postgres_server.find_pg_bin("pg_ctl")
        except postgres_server.PostgresNotAvailable as exc:
            return f"PostgreSQL is not installed: {exc}"
        return None
    if part == "kube-testenv":
        try:
            kubeenv.find_bin_dir()
        except kubeenv.KubeEnvNotAvailable as exc:
            return str(exc)
        return None
    if part == "real-node":
        return _real_node_missing()
    if part == "temporal-cli":
        try:
            temporal_server.find_temporal_cli()
        except temporal_server.TemporalNotAvailable as exc:
            return str(exc)
        return None
    if part == "gvisor-workspaces":
        if shutil.which("runsc") is None:
            return "runsc is not installed"
        return None if os.geteuid() == 0 else "gVisor takes a workspace only on a root worker"
    if part == "dbos":
        if importlib.util.find_spec("dbos") is None:
            return "DBOS Transact (the engine benchmark's peer) is not installed: pip install dbos==3.4.0"
        return None
    if part == "agent-sandbox-sdk":
        if importlib.util.find_spec("k8s_agent_sandbox") is None or importlib.util.find_spec("kubernetes") is None:
            return "the agent-sandbox SDK is not installed: pip install k8s-agent-sandbox==1.0.8"
        return None
    return None if shutil.which(part) is not None else f"{part} is not installed"


def _run(case: Bench) -> subprocess.CompletedProcess[str]:
    """Runs the benchmark in its own session; past the timeout, SIGINT (so its context managers stop
    the servers it started), then SIGKILL to the whole group."""
    argv = [sys.executable, str(BENCHMARKS / f"{case.name}.py"), *case.args]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=case.timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(
            f"{case.name} still running after {case.timeout_s:g}s\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        )
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _result_fields(stdout: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output"
    last = lines[-1]
    assert last.startswith("RESULT "), f"last line is not a RESULT line: {last!r}"
    pairs = [field.partition("=") for field in last.removeprefix("RESULT ").split()]
    assert all(sep == "=" and key for key, sep, _ in pairs), f"not key=value fields: {last!r}"
    keys = [key for key, _, _ in pairs]
    assert len(keys) == len(set(keys)), f"a key repeats: {last!r}"
    return {key: value for key, _, value in pairs}


def _documented_keys(name: str) -> set[str]:
    """The keys of the ``RESULT ...`` line the benchmark's module docstring documents."""
    doc = ast.get_docstring(ast.parse((BENCHMARKS / f"{name}.py").read_text())) or ""
    found = re.search(r"``RESULT (.*?)``", doc, re.DOTALL)
    assert found is not None, f"benchmarks/{name}.py does not document its RESULT line"
    return set(re.findall(r"(\w+)=", found.group(1)))


def test_every_benchmark_has_a_case() -> None:
    assert {p.stem for p in BENCHMARKS.glob("*.py")} == {case.name for case in CASES}


@pytest.mark.parametrize("case", _params(with_timeout=False))
def test_benchmark_documents_the_keys_checked_here(case: Bench) -> None:
    assert _documented_keys(case.name) == case.keys


@pytest.mark.parametrize("case", _params(with_timeout=True))
def test_benchmark_runs_and_reports(case: Bench) -> None:
    reasons = [reason for reason in map(_missing, case.needs) if reason is not None]
    if reasons:
        pytest.skip(f"benchmarks/{case.name}.py: " + "; ".join(reasons))
    started = time.monotonic()
    done = _run(case)
    took = time.monotonic() - started
    assert done.returncode == 0, (
        f"exit {done.returncode} after {took:.1f}s\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    )
    fields = _result_fields(done.stdout)
    assert set(fields) == case.keys, f"RESULT keys {sorted(fields)}, documented {sorted(case.keys)}"
    may_be_nan = {key for key, part in case.nan_without if _missing(part) is not None}
    for key, value in fields.items():
        try:
            number = float(value)
        except ValueError:
            pytest.fail(f"{key}={value!r} is not a number")
        if key in may_be_nan:
            assert math.isnan(number), f"{key}={value}: documented as nan when {dict(case.nan_without)[key]} is missing"
        else:
            assert math.isfinite(number), f"{key}={value} is not finite"
    print(f"benchmarks/{case.name}.py {' '.join(case.args)}: {took:.1f}s")
