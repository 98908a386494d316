"""``ironflow run``, ``ironflow runs …`` against a real SQLite store; the review example end to end.

The example test runs the real Claude Code CLI in a real bubblewrap sandbox against the
offline model server, as a user would run it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ironflow import labels
from ironflow.cli.app import app
from ironflow.engine import model
from ironflow.results import AgentResult
from ironflow.testing.polling import eventually_sync

HERE = Path(__file__).parent
WORKFLOWS = HERE / "engine_workflows.py"
EXAMPLE = HERE.parents[2] / "examples" / "workflows" / "review.py"
FIX_EXAMPLE = HERE.parents[2] / "examples" / "workflows" / "fix.py"


def cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'engine.db'}"


def test_run_with_wait_executes_the_run_and_prints_its_output(store: str) -> None:
    code, out, err = cli("run", f"{WORKFLOWS}:with_op", "--input", '{"a": 2, "b": 40}', "--wait", "--store", store)
    assert (code, json.loads(out)) == (0, 42)
    assert "✓ add (op)" in err


def test_a_failed_run_exits_1_and_says_why(store: str) -> None:
    code, out, err = cli("run", f"{WORKFLOWS}:not_storable", "--wait", "--store", store)
    assert code == 1
    assert out == ""
    assert "failed: the workflow's return value cannot be stored" in err


def test_a_run_past_its_deadline_exits_1_naming_the_deadline_and_its_step_is_stopped(
    store: str, tmp_path: Path
) -> None:
    gate = tmp_path / "never"
    code, out, err = cli(
        "run", f"{WORKFLOWS}:gated", "--input", json.dumps({"gate": str(gate)}), "--deadline", "1s", "--wait",
        "--store", store,
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert "failed: the run passed its deadline" in err
    code, doc, _ = cli("runs", "list", "-o", "json", "--store", store)
    (run,) = json.loads(doc)
    assert run["deadline_at"] is not None


def test_run_without_wait_queues_the_run_and_prints_its_id(store: str) -> None:
    code, out, err = cli("run", f"{WORKFLOWS}:linear", "--input", '{"steps": ["a"]}', "--store", store)
    assert code == 0
    run_id = out.strip()
    assert f"run {run_id} queued: an `ironflow worker` on the same --store takes it" in err
    assert store not in err
    code, out, _ = cli("runs", "list", "--store", store, "-o", "json")
    (listed,) = json.loads(out)
    assert (listed["id"], listed["status"], listed["workflow"]) == (run_id, "pending", f"{WORKFLOWS}:linear")

    assert cli("runs", "cancel", run_id, "--store", store)[:2] == (0, f"run {run_id} cancelled\n")
    assert cli("runs", "retry", run_id, "--store", store)[:2] == (0, f"run {run_id} pending\n")
    code, out, _ = cli("runs", "show", run_id, "--store", store, "-o", "json")
    shown = json.loads(out)
    assert (shown["id"], shown["status"], shown["steps"]) == (run_id, "pending", [])


def test_runs_show_lists_steps_with_their_pod_selector_and_result(store: str) -> None:
    assert cli("run", f"{WORKFLOWS}:with_op", "--input", '{"a": 1, "b": 1}', "--wait", "--store", store)[0] == 0
    (run,) = json.loads(cli("runs", "list", "--store", store, "-o", "json")[1])
    shown = json.loads(cli("runs", "show", run["id"], "--store", store, "-o", "json")[1])
    (step,) = shown["steps"]
    assert (step["name"], step["kind"], step["status"], step["result"], step["pods"]) == (
        "add", "op", "succeeded", 2, None
    )  # fmt: skip
    code, table, _ = cli("runs", "show", run["id"], "--store", store)
    assert code == 0
    assert "succeeded" in table
    assert "add" in table


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", f"{WORKFLOWS}:linear", "--input", "{nope"], "error: --input is not valid JSON (Expecting property"),
        (["run", "missing.py:flow"], "error: workflow file 'missing.py' does not exist"),
        (["run", f"{WORKFLOWS}:nope"], f"error: workflow 'nope' not found in '{WORKFLOWS}'"),
        (["run", "no_colon"], "error: workflow reference 'no_colon' must look like FILE.py:function"),
        (["run", f"{WORKFLOWS}:linear", "--fake-model"], "error: --fake-model only applies with --wait"),
        (["run", f"{WORKFLOWS}:linear", "--store", "mysql://x"], "error: unknown store URL scheme in 'mysql'"),
        (["run", f"{WORKFLOWS}:linear", "--wait", "--account", "x=nope"], "error: account 'x=nope' must look like"),
        (["run", f"{WORKFLOWS}:linear", "--account", "x=env:X"], "error: --account only applies with --wait"),
        (["run", f"{WORKFLOWS}:linear", "--deadline", "soon"], "error: --deadline: invalid duration 'soon': use e.g."),
        (["run", f"{WORKFLOWS}:linear", "--deadline", "0s"], "error: --deadline: invalid duration '0s'"),
        (["runs", "show", "0000"], "error: no run 0000 in the store; list runs with `ironflow runs list`"),
        (["runs", "cancel", "0000"], "error: no run 0000 in the store"),
        (["runs", "list", "--store", "typo.db"], "error: no SQLite store at 'typo.db': its file does not exist"),
        (["worker", "--metrics-port", "70000"], "error: invalid --metrics-port '70000': use a port number from 0"),
        (["worker", "--metrics-port", "http"], "error: invalid --metrics-port 'http': use a port number from 0"),
        (["worker", "--metrics-host", "0.0.0.0"], "error: --metrics-host only applies with --metrics-port"),
        (
            ["worker", "--metrics-port", "0", "--metrics-host", "192.0.2.1"],  # TEST-NET: no address of this machine
            "error: cannot serve metrics on 192.0.2.1:0: Cannot assign requested address; choose another port",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_problem(
    store: str, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if args[:2] in (["runs", "show"], ["runs", "cancel"]):
        assert cli("run", f"{WORKFLOWS}:linear", "--input", "{}", "--store", store)[0] == 0  # the store exists
    if "--store" not in args:
        args = [*args, "--store", store]
    code, out, err = cli(*args)
    assert code == 2
    assert out == ""
    assert err.startswith(message)
    assert not (tmp_path / "typo.db").exists()  # a reader never makes the store it cannot find
    assert err.count("\n") == 1


def test_only_failed_or_cancelled_runs_are_retried(store: str) -> None:
    run_id = cli("run", f"{WORKFLOWS}:linear", "--input", '{"steps": []}', "--store", store)[1].strip()
    code, _, err = cli("runs", "retry", run_id, "--store", store)
    assert code == 2
    assert err == f"error: run {run_id} is pending; only failed or cancelled runs can be retried\n"


@pytest.mark.bwrap
@pytest.mark.claude_cli
def test_the_review_example_runs_offline_on_the_local_sandbox(tmp_path: Path) -> None:
    """The documented command: real CLI in bubblewrap, answers from the offline model server."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    from ironflow.claude.cli import find_claude_cli

    try:
        find_claude_cli()
    except Exception as exc:
        pytest.skip(f"the pinned Claude Code CLI is not installed: {exc}")
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    proc = subprocess.run(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", "run", f"{EXAMPLE}:review",
         "--input", '{"change": "add retries"}', "--wait", "--fake-model", "--store", store],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    output = json.loads(proc.stdout)
    assert output["change"] == "add retries"
    assert output["summary"] == "Looks good to me. (offline fake model)"
    for step in ("plan", "review correctness", "review security", "review tests", "summarise", "summary"):
        assert f"✓ {step} (" in proc.stderr


@pytest.mark.claude_cli
def test_the_fix_example_hands_its_patch_to_the_review_and_leaves_the_repo_untouched(
    store: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIX_EXAMPLE.parent / "fix-demo", repo)
    before = (repo / "calc.py").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", "run", f"{FIX_EXAMPLE}:fix",
         "--input", json.dumps({"repo": str(repo), "bug": "add() subtracts"}), "--wait",
         f"--fake-model={FIX_EXAMPLE.with_suffix('.yaml')}", "--store", store],
        capture_output=True, text=True, timeout=180, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    output = json.loads(proc.stdout)
    assert output["changed_files"] == ["calc.py"]
    assert "-    return a - b\n+    return a + b\n" in output["patch"]
    assert output["review"].startswith("Reviewed: the patch makes add() return a + b")
    assert (repo / "calc.py").read_bytes() == before
    (run,) = json.loads(cli("runs", "list", "--store", store, "-o", "json")[1])
    shown = json.loads(cli("runs", "show", run["id"], "--store", store, "-o", "json")[1])
    fix_step = next(s for s in shown["steps"] if s["name"] == "fix")
    assert fix_step["result"]["workspace"]["changed_files"] == [{"path": "calc.py", "change": "modified"}]


def test_runs_list_and_show_print_the_same_document_as_yaml_as_json(store: str) -> None:
    assert cli("run", f"{WORKFLOWS}:with_op", "--input", '{"a": 1, "b": 1}', "--wait", "--store", store)[0] == 0
    listed = cli("runs", "list", "--store", store, "-o", "yaml")
    assert listed[0] == 0
    assert yaml.safe_load(listed[1]) == json.loads(cli("runs", "list", "--store", store, "-o", "json")[1])
    (run,) = yaml.safe_load(listed[1])
    shown = cli("runs", "show", run["id"], "--store", store, "-o", "yaml")
    assert shown[1].startswith(f"id: {run['id']}\n")  # YAML, not JSON (which YAML also reads)
    assert yaml.safe_load(shown[1]) == json.loads(cli("runs", "show", run["id"], "--store", store, "-o", "json")[1])


def test_the_worker_command_executes_queued_runs_and_stops_on_sigterm(store: str) -> None:
    run_id = cli("run", f"{WORKFLOWS}:with_op", "--input", '{"a": 20, "b": 22}', "--store", store)[1].strip()

    def status() -> str:
        return str(json.loads(cli("runs", "show", run_id, "--store", store, "-o", "json")[1])["status"])

    worker = subprocess.Popen(
        [sys.executable, "-c", "from ironflow.cli.app import main; main()", "worker", "--store", store],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        eventually_sync(
            lambda: status() == "succeeded",
            limit_s=20,
            interval_s=0.1,
            what=lambda: f"the run to succeed; it is {status()}",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=10)
    assert worker.returncode == 0, err
    lines = err.splitlines()
    assert any(" info worker taking runs; Ctrl-C stops worker=" in line and " concurrency=1" in line for line in lines)
    (finished,) = [line for line in lines if " info step finished " in line]
    assert f"run_id={run_id} workflow={WORKFLOWS}:with_op backend=local attempt=1 step=add kind=op" in finished
    assert " outcome=succeeded duration_s=" in finished
    assert " info worker stopped worker=" in lines[-1]


def test_runs_show_of_a_local_run_prints_whole_results_and_no_pod_selectors(store: str, tmp_path: Path) -> None:
    """A local run's agent step has no pods (no selector is shown); a result longer than the
    table's cell, or of several lines, follows the table in full."""
    import asyncio

    from ironflow.engine.sqlite import SqliteStore

    answer = "first line of the answer\n" + "x" * 200 + "\nlast line"

    async def seed() -> str:
        opened = SqliteStore(tmp_path / "engine.db")
        await opened.open()
        try:
            run = await opened.create_run(
                model.RunRecord(id=model.new_id(), workflow="w.py:f", input=None, backend="local")
            )
            await opened.save_step(model.StepRecord(run.id, 0, "fix", model.StepKind.AGENT, id="s0",
                                                    status=model.StepStatus.SUCCEEDED, attempts=1,
                                                    result=AgentResult(answer, 10)))  # fmt: skip
            return run.id
        finally:
            await opened.close()

    run_id = asyncio.run(seed())
    code, out, _ = cli("runs", "show", run_id, "--store", store)
    assert code == 0
    assert "local sandbox" in out
    assert labels.LABEL_RUN_ID not in out
    assert "first line of the answer…" in out
    assert f"step 0 fix:\n{answer}" in out
    code, out, _ = cli("runs", "show", run_id, "--store", store, "-o", "json")
    (step,) = json.loads(out)["steps"]
    assert step["pods"] is None
