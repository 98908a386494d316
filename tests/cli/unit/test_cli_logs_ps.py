"""What ``ironflow logs`` and ``ironflow ps`` print, from values (no store, no sandbox)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ironflow import labels
from ironflow.cli import logs
from ironflow.engine import model, running
from ironflow.local import workdirs

OUT, ERR, NOTE = model.TranscriptStream.STDOUT, model.TranscriptStream.STDERR, model.TranscriptStream.IRONFLOW
OWNER = workdirs.Owner("boot", "pid:[1]", 4242, 99)
AGENT = model.StepKind.AGENT
STEP_LABEL = labels.LABEL_STEP


def chunk(stream: model.TranscriptStream, text: str, *, position: int = 0, attempt: int = 1) -> model.TranscriptChunk:
    return model.TranscriptChunk("r", position, f"s{position}", attempt, stream, text, 1.5, seq=7)


def test_text_shows_a_header_per_step_attempt_and_marks_stderr_and_notes() -> None:
    result = json.dumps({"type": "result", "result": "ok", "num_turns": 1})
    first = chunk(OUT, f"{result}\nnot json")
    assert logs.chunk_lines_text(first, None) == [
        "── step 0 's0', attempt 1", "  result (1 turn): ok", "  not json"
    ]  # fmt: skip
    assert logs.chunk_lines_text(chunk(ERR, "oops"), first) == ["  stderr: oops"]
    assert logs.chunk_lines_text(chunk(NOTE, "attempt 1 failed", attempt=2), first) == [
        "── step 0 's0', attempt 2", "  [ironflow] attempt 1 failed"
    ]  # fmt: skip


def test_json_prints_every_stored_line_as_an_object() -> None:
    assert [json.loads(line) for line in logs.chunk_lines_json(chunk(ERR, "a\nb"))] == [
        {"run_id": "r", "position": 0, "step": "s0", "attempt": 1, "seq": 7, "stream": "stderr", "at": 1.5, "line": x}
        for x in ("a", "b")
    ]


STEPS = [model.StepRecord("r", i, name, model.StepKind.AGENT) for i, name in enumerate(["plan", "fix", "fix", "7"])]


@pytest.mark.parametrize(("ref", "position"), [("plan", 0), ("1", 1), ("7", 3), ("3", 3)])
def test_a_step_is_named_by_its_name_else_its_position(ref: str, position: int) -> None:
    assert logs.step_position(STEPS, ref, "r") == position


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("fix", "error: run r has 2 steps named 'fix' (positions 1, 2); give the position\n"),
        ("9", "error: run r has no step '9'; its steps: 0 'plan', 1 'fix', 2 'fix', 3 '7'\n"),
    ],
)
def test_a_step_that_names_none_or_several_is_exit_2(
    ref: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        logs.step_position(STEPS, ref, "r")
    assert caught.value.code == 2
    assert capsys.readouterr().err == message


def _run(run_id: str, backend: str, worker: str | None, **kw: object) -> model.RunRecord:
    return model.RunRecord(run_id, "w.py:f", None, model.RunStatus.RUNNING, backend=backend, worker=worker,
                           created_at=100.0, **kw)  # type: ignore[arg-type]  # fmt: skip


def _step(run_id: str, position: int, kind: model.StepKind, **kw: object) -> model.StepRecord:
    return model.StepRecord(run_id, position, f"s{position}", kind, started_at=110.0, **kw)  # type: ignore[arg-type]


def test_the_report_says_where_each_running_steps_sandbox_is() -> None:
    runs = [
        _run("k", "k8s", "elsewhere:7:abc"),
        _run("l", "local", "here:4242:abc"),
        _run("o", "local", "other-host:4242:abc"),
        _run("c", "local", "here:4242:abc", parent_run_id="l"),
    ]
    steps = {
        "k": [_step("k", 0, model.StepKind.AGENT, status=model.StepStatus.SUCCEEDED), _step("k", 1, AGENT)],
        "l": [_step("l", 0, model.StepKind.AGENT), _step("l", 1, model.StepKind.SUB_WORKFLOW, child_run_id="c")],
        "o": [_step("o", 0, model.StepKind.AGENT), _step("o", 1, model.StepKind.OP)],
    }
    dirs = [workdirs.LiveDir("/tmp/ironflow-local-a", OWNER, 105.0),
            workdirs.LiveDir("/tmp/ironflow-local-b", dataclasses.replace(OWNER, pid=1), 106.0)]  # fmt: skip
    shown = running.report(runs, steps, dirs, host="here", now=130.0)
    where = {(r["id"], s["position"]): s["sandbox"] for r in shown["runs"] for s in r["steps"]}
    assert where == {
        ("k", 1): {"pods": labels.selector(labels.RUNNER_SELECTOR, {labels.LABEL_RUN_ID: "k", STEP_LABEL: "s1"})},
        ("l", 0): {"host": "here", "pid": 4242, "local_dirs": ["/tmp/ironflow-local-a"]},
        ("l", 1): {"child_run_id": "c"},
        ("o", 0): {"host": "other-host"},
        ("o", 1): None,
    }  # fmt: skip
    by_id = {r["id"]: r for r in shown["runs"]}
    assert [r["id"] for r in shown["runs"]] == ["c", "k", "l", "o"]  # oldest first, then by id
    assert (by_id["c"]["age_s"], by_id["c"]["parent_run_id"], by_id["c"]["steps"]) == (30.0, "l", [])
    assert by_id["l"]["steps"][0]["running_s"] == 20.0
    assert shown["local_sandboxes"] == [
        {"path": "/tmp/ironflow-local-a", "pid": 4242, "age_s": 25.0, "runs": ["l", "c"]},
        {"path": "/tmp/ironflow-local-b", "pid": 1, "age_s": 24.0, "runs": []},
    ]
