"""``ironflow logs`` and ``ironflow ps`` on real stores (SQLite and PostgreSQL), and run ids taken
by a unique prefix by every command that takes one.

The first tests fill the store through the engine with the recording provider (its output is a
recorded stream-json transcript of the real CLI); the last ones run the real Claude Code CLI in
bubblewrap against the offline model: ``logs -f`` follows a run a worker executes until it
finishes, ``ps`` sees it running, and a secret a tool printed is stored nowhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from typer.testing import CliRunner

from ironflow import errors, labels
from ironflow.cli.app import app
from ironflow.engine import model
from ironflow.engine.runner import Runner
from ironflow.engine.store import Store, open_store
from ironflow.engine.worker import Worker, worker_id
from ironflow.local import workdirs
from ironflow.secrets import REDACTED, find_leaks
from ironflow.testing.engine import RecordingProvider

HERE = Path(__file__).parent
WORKFLOWS = HERE / "engine_workflows.py"
STREAM_TOOL = (HERE.parents[1] / "fixtures" / "claude" / "stream_tool.out").read_text().splitlines()
FAKE_KEY = "sk-ant-api03-" + "Fak3K3y_" * 10 + "AA"
IRONFLOW = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]
T = TypeVar("T")


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def with_store(url: str, work: Callable[[Store], Awaitable[T]]) -> T:
    """``work`` on the store at ``url``, from a test that is not a coroutine (``cli`` runs its own loop)."""

    async def run() -> T:
        store = open_store(url)
        await store.open()
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


def execute(url: str, workflow: str, input: Any, provider: RecordingProvider) -> str:
    """Queue a run and execute it to its end with ``provider``; its id."""

    async def work(store: Store) -> str:
        run_id = model.new_id()
        await store.create_run(model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:{workflow}", input=input))
        await Worker(store, lambda r: Runner(store, provider), lease_s=5).run(until_idle=True)
        return run_id

    return with_store(url, work)


# --- logs ------------------------------------------------------------------------------------


def test_logs_prints_each_step_condensed_and_json_prints_every_stored_line(store_url: str) -> None:
    provider = RecordingProvider(
        output={"plan": [("stdout", line) for line in STREAM_TOOL] + [("stderr", "a warning")]},
        failures={"fix": [errors.ProcessFailed(1, "it broke")]},
    )
    run_id = execute(store_url, "linear", {"steps": ["plan", "fix"]}, provider)
    code, out, err = cli("logs", run_id, "--store", store_url)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "── step 0 'plan', attempt 1",
        "  session started (model claude-sonnet-5-5)",
        "  assistant: Running it.",
        '  → Bash command="echo tool-says-hi"',
        "    ← tool-says-hi",
        "  assistant: The tool said tool-says-hi.",
        "  result (2 turns, 0.1s, $0.0001): The tool said tool-says-hi.",
        "  stderr: a warning",
        "  result: done plan",
        "── step 1 'fix', attempt 1",
        "  stderr: it broke",
        "  [ironflow] attempt 1 failed: ProcessFailed: claude process exited with code 1: it broke",
    ]
    code, out, _ = cli("logs", run_id, "plan", "--store", store_url, "-o", "json")
    stored = [json.loads(line) for line in out.splitlines()]
    assert [(s["stream"], s["line"]) for s in stored] == [
        *[("stdout", line) for line in STREAM_TOOL], ("stderr", "a warning"),
        ("stdout", '{"type": "result", "result": "done plan"}'),
    ]  # fmt: skip
    assert {(s["run_id"], s["position"], s["step"], s["attempt"]) for s in stored} == {(run_id, 0, "plan", 1)}
    assert cli("logs", run_id, "1", "--store", store_url)[1].splitlines()[0] == "── step 1 'fix', attempt 1"


def test_logs_of_a_run_without_a_transcript_says_so_and_a_bad_step_is_exit_2(store_url: str) -> None:
    run_id = execute(store_url, "with_op", {"a": 1, "b": 2}, RecordingProvider())
    assert cli("logs", run_id, "--store", store_url) == (0, "", f"run {run_id} has no stored transcript (succeeded)\n")
    code, out, err = cli("logs", run_id, "nope", "--store", store_url)
    assert (code, out, err) == (2, "", f"error: run {run_id} has no step 'nope'; its steps: 0 'add'\n")


def test_logs_names_the_run_a_sub_workflow_steps_transcript_is_in(store_url: str) -> None:
    run_id = execute(store_url, "parent", {}, RecordingProvider())
    (_, child) = with_store(store_url, lambda store: store.steps(run_id))
    code, out, err = cli("logs", run_id, "--store", store_url)
    assert (code, out.splitlines()[0]) == (0, "── step 0 'plan', attempt 1")
    assert err == f"step 'child' is a sub-workflow: its transcript is `ironflow logs {child.child_run_id}`\n"
    code, out, _ = cli("logs", str(child.child_run_id), "--store", store_url)
    step_label = labels.sanitize_label_value("child step")
    assert out.splitlines() == ["── step 0 'child step', attempt 1", f"  result: done {step_label}"]


def test_a_store_failing_mid_command_is_one_line_and_exit_3(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    run_id = execute(url, "linear", {"steps": ["a"]}, RecordingProvider())
    with sqlite3.connect(tmp_path / "engine.db") as conn:
        conn.execute("DROP TABLE ironflow_transcripts")
    code, out, err = cli("logs", run_id, "--store", url)
    assert (code, out) == (3, "")
    assert err == "error: the SQLite store failed: OperationalError: no such table: ironflow_transcripts\n"


# --- run ids by prefix -----------------------------------------------------------------------


def test_a_unique_start_of_a_run_id_names_the_run_in_every_command(store_url: str) -> None:
    ids = [f"0190cafe-{n}" for n in range(7)] + ["0190beef-1"]

    async def seed(store: Store) -> None:
        for run_id in ids:
            await store.create_run(model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:linear", input={"steps": []}))

    with_store(store_url, seed)
    shown = json.loads(cli("runs", "show", "0190b", "--store", store_url, "-o", "json")[1])
    assert shown["id"] == "0190beef-1"
    assert cli("runs", "cancel", "0190be", "--store", store_url)[:2] == (0, "run 0190beef-1 cancelled\n")
    assert cli("runs", "retry", "0190bee", "--store", store_url)[:2] == (0, "run 0190beef-1 pending\n")
    assert cli("runs", "show", "0190cafe-3", "--store", store_url, "-o", "json")[0] == 0  # a whole id
    assert cli("logs", "0190beef", "--store", store_url)[0] == 0
    named = "0190cafe-0, 0190cafe-1, 0190cafe-2, 0190cafe-3, 0190cafe-4, …"
    for command in (["runs", "show"], ["runs", "cancel"], ["runs", "retry"], ["logs"]):
        code, out, err = cli(*command, "0190ca", "--store", store_url)
        assert (code, out) == (2, "")
        assert err == f"error: run id 0190ca is the start of several runs' ids ({named}); give more of it\n"
        code, _, err = cli(*command, "0190d", "--store", store_url)
        assert (code, err) == (2, "error: no run 0190d in the store; list runs with `ironflow runs list`\n")
    assert cli("logs", "", "--store", store_url)[0] == 2


# --- ps --------------------------------------------------------------------------------------


def test_ps_lists_the_running_runs_their_running_steps_and_this_machines_sandboxes(store_url: str) -> None:
    here = worker_id()  # this process stands for the local run's worker: the sandbox dir is ours

    async def seed(store: Store) -> None:
        for run_id, backend, worker in (("run-k8s", "k8s", "far-away:1:abcdef"), ("run-local", "local", here)):
            await store.create_run(model.RunRecord(run_id, f"{WORKFLOWS}:linear", None, backend=backend))
            assert await store.claim_run(worker, 60, run_id=run_id) is not None
            await store.save_step(model.StepRecord(run_id, 0, "done", model.StepKind.AGENT,
                                                   status=model.StepStatus.SUCCEEDED, started_at=1.0))  # fmt: skip
            await store.save_step(model.StepRecord(run_id, 1, "review", model.StepKind.AGENT, started_at=1.0))
        await store.create_run(model.RunRecord("run-pending", f"{WORKFLOWS}:linear", None))

    with_store(store_url, seed)
    with workdirs.run_dir(None) as sandbox:
        code, out, _ = cli("ps", "--store", store_url, "-o", "json")
        _, table, _ = cli("ps", "--store", store_url)
    assert code == 0
    shown = json.loads(out)
    assert [(r["id"], r["backend"], [s["name"] for s in r["steps"]]) for r in shown["runs"]] == [
        ("run-k8s", "k8s", ["review"]), ("run-local", "local", ["review"])
    ]  # fmt: skip
    k8s, local = (r["steps"][0]["sandbox"] for r in shown["runs"])
    assert k8s == {"pods": labels.selector(labels.RUNNER_SELECTOR, {labels.LABEL_RUN_ID: "run-k8s",
                                                                    labels.LABEL_STEP: "review"})}  # fmt: skip
    assert local == {"host": here.split(":")[0], "pid": os.getpid(), "local_dirs": [sandbox]}
    assert {"path": sandbox, "pid": os.getpid(), "runs": ["run-local"]}.items() <= next(
        d for d in shown["local_sandboxes"] if d["path"] == sandbox
    ).items()
    assert "run-pending" not in out
    assert "1 review" in table
    assert f"pods -l {k8s['pods']}" in table
    assert sandbox in table
    assert cli("ps", "--store", store_url, "-o", "json")[0] == 0  # the sandbox is gone: still a report
    assert sandbox not in cli("ps", "--store", store_url, "-o", "json")[1]


# --- the real Claude Code CLI ------------------------------------------------------------------


def _needs_the_local_sandbox() -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    from ironflow.claude.cli import find_claude_cli

    try:
        find_claude_cli()
    except Exception as exc:
        pytest.skip(f"the pinned Claude Code CLI is not installed: {exc}")


def _script(tmp_path: Path, command: str) -> Path:
    """An offline model that runs ``command`` with Bash, then answers ``done``."""
    script = tmp_path / "script.yaml"
    call = f"{{name: Bash, input: {{command: {json.dumps(command)}}}}}"
    script.write_text(f"turns:\n  - tool_use: {call}\n  - text: done\n")
    return script


@contextmanager
def _process(*args: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([*IRONFLOW, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


@pytest.mark.bwrap
@pytest.mark.claude_cli
def test_logs_follow_prints_a_run_as_a_worker_executes_it_and_ends_with_it(store_url: str, tmp_path: Path) -> None:
    _needs_the_local_sandbox()
    script = _script(tmp_path, "echo started; sleep 4; echo finished")
    run_id = cli("run", f"{WORKFLOWS}:shell", "--store", store_url)[1].strip()
    with _process("logs", run_id[:13], "-f", "--store", store_url) as follower:
        assert follower.poll() is None  # a pending run is waited for
        with _process("worker", f"--fake-model={script}", "--store", store_url) as worker:
            assert follower.stdout is not None
            seen = [follower.stdout.readline()]
            while not seen[-1].startswith("  → Bash") and len(seen) < 20:
                seen.append(follower.stdout.readline())
            assert seen[0] == "── step 0 'shell', attempt 1\n"
            assert seen[-1] == '  → Bash command="echo started; sleep 4; echo finished"\n'
            shown = json.loads(cli("ps", "--store", store_url, "-o", "json")[1])  # the tool still sleeps
            (running,) = shown["runs"]
            assert (running["id"], [s["name"] for s in running["steps"]]) == (run_id, ["shell"])
            assert running["steps"][0]["sandbox"]["pid"] == worker.pid
            assert len(running["steps"][0]["sandbox"]["local_dirs"]) == 1
            out, err = follower.communicate(timeout=60)  # ends by itself when the run is finished
            assert follower.returncode == 0, err
    rest = out.splitlines()
    assert rest[0] == "    ← started finished"
    assert rest[-1].startswith("  result (2 turns, ")
    assert rest[-1].endswith("): done")
    status = json.loads(cli("runs", "show", run_id, "--store", store_url, "-o", "json")[1])["status"]
    assert status == "succeeded"


def _everything_stored(store_url: str) -> list[str]:
    """Every byte the store keeps, as text: the SQLite files, or every row of every table."""
    if store_url.startswith("sqlite:"):
        path = Path(store_url.removeprefix("sqlite://"))
        return [p.read_bytes().decode(errors="replace") for p in path.parent.glob(path.name + "*")]

    async def dump() -> list[str]:
        conn = await asyncpg.connect(store_url)
        try:
            tables = [r["tablename"] for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE tablename "
                                                              "LIKE 'ironflow_%'")]  # fmt: skip
            return [str(r[0]) for t in tables for r in await conn.fetch(f"SELECT t::text FROM {t} t")]  # noqa: S608
        finally:
            await conn.close()

    return asyncio.run(dump())


@pytest.mark.bwrap
@pytest.mark.claude_cli
def test_a_secret_a_tool_printed_is_stored_nowhere(store_url: str, tmp_path: Path) -> None:
    _needs_the_local_sandbox()
    script = _script(tmp_path, f"echo first line; echo {FAKE_KEY}")
    done = subprocess.run(
        [*IRONFLOW, "run", f"{WORKFLOWS}:shell", "--wait", f"--fake-model={script}", "--store", store_url],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run,) = json.loads(cli("runs", "list", "--store", store_url, "-o", "json")[1])
    out = cli("logs", run["id"], "--store", store_url, "-o", "json")[1]
    results = [json.loads(s["line"]) for s in map(json.loads, out.splitlines()) if '"tool_result"' in s["line"]]
    (tool_result,) = results
    assert tool_result["message"]["content"][0]["content"] == f"first line\n{REDACTED}"  # the tool did print it
    assert "→ Bash" in cli("logs", run["id"], "--store", store_url)[1]
    stored = _everything_stored(store_url)
    assert any("tool_result" in text for text in stored)  # the transcript is in what was scanned
    assert find_leaks([FAKE_KEY, FAKE_KEY[:20]], *stored, out) == []
