"""The pages as functions of records: rows, totals, the older link's cursor, buttons, timeline, turns, live page."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ironflow import labels
from ironflow.engine import model
from ironflow.results import AgentResult
from ironflow.ui import run_page, runs_page, sandboxes_page
from ironflow.ui.queries import RunsQuery


def run(run_id: str, status: model.RunStatus = model.RunStatus.SUCCEEDED, **fields: Any) -> model.RunRecord:
    return model.RunRecord(
        id=run_id,
        workflow="/src/flows/review.py:review",
        input={},
        status=status,
        created_at=100.0,
        updated_at=112.5,
        **fields,
    )


def test_the_runs_page_shows_each_run_with_its_totals_and_a_cursor_to_older_runs() -> None:
    runs = [run("r3", model.RunStatus.RUNNING), run("r2", model.RunStatus.FAILED), run("r1")]
    totals = {"r3": model.Usage(1000, 234, 0.125, 2), "r2": model.Usage(), "r1": model.Usage(5, 5, 0.01, 1)}
    query = RunsQuery(status=None, workflow="review.py:review", limit=3)
    page = runs_page.render(runs_page.RunsView(query, runs, totals, has_older=True, now=130.0))
    rows = re.findall(r'<tr class="run" data-run-id="([^"]+)">(.*?)</tr>', page)
    assert [r[0] for r in rows] == ["r3", "r2", "r1"]
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1])]
    assert cells == ["r3", "review.py:review", "running", "0", "1970-01-01 00:01:40Z", "30.0 s", "1,234", "$0.1250"]
    assert re.findall(r"<td[^>]*>(.*?)</td>", rows[1][1])[-2:] == ["-", "-"]  # no usage: dashes, not zeros
    assert 'href="/?workflow=review.py%3Areview&amp;limit=3&amp;before=r1">Older runs' in page
    assert 'value="review.py:review"' in page


def test_the_last_page_has_no_older_link_and_an_empty_page_says_so() -> None:
    last = runs_page.render(runs_page.RunsView(RunsQuery(before="r9"), [run("r1")], {}, has_older=False, now=0.0))
    assert "Older runs" not in last
    assert "No older runs." in last
    empty = runs_page.render(runs_page.RunsView(RunsQuery(status=model.RunStatus.FAILED), [], {}, False, 0.0))
    assert "No runs match." in empty
    assert '<option value="failed" selected>failed</option>' in empty


def agent(position: int, name: str, **fields: Any) -> model.StepRecord:
    values: dict[str, Any] = {"status": model.StepStatus.SUCCEEDED, "attempts": 1, **fields}
    return model.StepRecord(
        "r1", position, name, model.StepKind.AGENT, started_at=100.0 + position, finished_at=101.0 + position, **values
    )


def chunk(position: int, stream: model.TranscriptStream, text: str, attempt: int = 1) -> model.TranscriptChunk:
    return model.TranscriptChunk("r1", position, f"step {position}", attempt, stream, text, 1.0)


def view(record: model.RunRecord, **fields: Any) -> run_page.RunView:
    steps = [
        agent(0, "plan", result=AgentResult("ok", 900, cost_usd=0.02, input_tokens=40, output_tokens=2)),
        agent(
            1,
            "fix",
            status=model.StepStatus.FAILED,
            attempts=3,
            error={"type": "ProcessFailed", "message": "exit 1", "retryable": True},
        ),
        model.StepRecord("r1", 2, "summarise", model.StepKind.SUB_WORKFLOW, child_run_id="child-1", started_at=103.0),
    ]
    said = json.dumps(
        {
            "type": "assistant",
            "message": {
                "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "name": "Bash", "input": {"command": "ls"}},
                ]
            },
        }
    )
    result = json.dumps({"type": "result", "result": "done", "num_turns": 2})
    defaults: dict[str, Any] = {
        "steps": steps,
        "chunks": [
            chunk(0, model.TranscriptStream.STDOUT, f"{said}\n{result}"),
            chunk(1, model.TranscriptStream.STDERR, "boom"),
            chunk(1, model.TranscriptStream.IRONFLOW, "gave up", 3),
        ],
        "usage": model.Usage(40, 2, 0.02, 1),
        "now": 110.0,
        "children": {"child-1": run("child-1", model.RunStatus.RUNNING, parent_run_id="r1", root_run_id="r1")},
        "refusals": {"cancel": "run r1 already succeeded; nothing to cancel", "retry": None},
        "csrf": {"cancel": "c" * 64, "retry": "f" * 64},
    }
    return run_page.RunView(run=record, **{**defaults, **fields})


def test_the_run_page_shows_the_steps_timeline_with_their_usage_and_where_they_ran() -> None:
    selectors = {0: "ironflow.io/run-id=r1,ironflow.io/step=plan", 1: "ironflow.io/run-id=r1,ironflow.io/step=fix"}
    page = run_page.render(view(run("r1", model.RunStatus.FAILED, backend="k8s"), pod_selectors=selectors))
    rows = re.findall(r'<tr class="step" data-position="(\d)">(.*?)</tr>', page)
    assert [r[0] for r in rows] == ["0", "1", "2"]
    plan = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", rows[0][1])]
    assert plan[2:] == [
        "agent",
        "k8s",
        "pods -l ironflow.io/run-id=r1,ironflow.io/step=plan",
        "1",
        "succeeded",
        "1970-01-01 00:01:40Z",
        "1.0 s",
        "42",
        "$0.0200",
    ]
    assert "ProcessFailed: exit 1" in rows[1][1]
    assert ">3<" in rows[1][1]  # its attempts
    assert 'href="/runs/child-1"' in rows[2][1]
    assert "status-running" in rows[2][1]  # the child's own state
    assert page.count('<svg class="bar"') == 3
    assert "42 (40 in, 2 out)" in page
    assert "(with its sub-workflows)" in page


def test_the_transcript_is_shown_as_turns_per_step_and_attempt() -> None:
    page = run_page.render(view(run("r1")))
    turns = re.findall(r'<li class="turn turn-([a-z-]+)">(.*?)</li>', page)
    assert turns == [
        ("assistant", "assistant: Looking."),
        ("tool", "→ Bash command=&quot;ls&quot;"),
        ("result", "result (2 turns): done"),
        ("stderr", "stderr: boom"),
        ("ironflow", "[ironflow] gave up"),
    ]
    assert re.findall(r"<h3>(attempt \d)</h3>", page) == ["attempt 1", "attempt 1", "attempt 3"]
    assert 'href="#transcript-0"' in page
    assert 'id="transcript-1"' in page


def test_only_the_buttons_the_runs_state_allows_are_shown_each_with_its_csrf_field() -> None:
    page = run_page.render(view(run("r1", model.RunStatus.FAILED)))
    assert '<form method="post" action="/runs/r1/retry"><input type="hidden" name="csrf" value="' + "f" * 64 in page
    assert "/runs/r1/cancel" not in page
    neither = run_page.render(
        view(run("c1", parent_run_id="r1", root_run_id="r1"), refusals={"cancel": "x", "retry": "y"})
    )
    assert "<form" not in neither
    assert 'href="/runs/r1"' in neither  # the parent


def test_a_running_run_s_page_reloads_itself_and_a_finished_one_does_not() -> None:
    assert '<meta http-equiv="refresh" content="5">' in run_page.render(view(run("r1", model.RunStatus.RUNNING)))
    assert "refresh" not in run_page.render(view(run("r1")))


def test_turn_kinds_follow_the_condensed_lines() -> None:
    assert [
        run_page.turn_kind(line)
        for line in (
            "assistant: hi",
            "→ Bash",
            "  ← out",
            "  ✗ failed",
            "result (error): x",
            "result (1 turn): ok",
            "thinking: hm",
            "session started (model m)",
            "plain text",
        )
    ] == ["assistant", "tool", "tool-result", "error", "error", "result", "thinking", "session", "other"]


def test_the_live_page_shows_what_ps_reports() -> None:
    report = {
        "runs": [
            {
                "id": "r1",
                "workflow": "/a/review.py:review",
                "backend": "local",
                "worker": "host:12:w",
                "parent_run_id": None,
                "age_s": 65.0,
                "steps": [
                    {
                        "position": 0,
                        "name": "plan",
                        "kind": "agent",
                        "running_s": 3.0,
                        "sandbox": {"host": "host", "pid": 12, "local_dirs": ["/tmp/ironflow-local-x"]},
                    }
                ],
            }
        ],
        "local_sandboxes": [{"path": "/tmp/ironflow-local-x", "pid": 12, "age_s": 3.0, "runs": ["r1"]}],
    }
    page = sandboxes_page.render(report)
    assert 'href="/runs/r1"' in page
    assert "<code>/tmp/ironflow-local-x</code>" in page
    assert "1 m 05 s" in page
    assert "0 plan" in page
    empty = sandboxes_page.render({"runs": [], "local_sandboxes": []})
    assert "No run is running in the store." in empty
    assert "No live local sandbox on this machine." in empty


def test_the_run_page_shows_the_cost_by_role_and_the_deadline_when_there_are() -> None:
    roles = [
        agent(0, "plan", result=AgentResult("ok", 9, cost_usd=0.5), labels={labels.LABEL_ROLE: "planner"}),
        agent(1, "review", result=AgentResult("ok", 9, cost_usd=0.25), labels={labels.LABEL_ROLE: "reviewer"}),
        agent(2, "again", result=AgentResult("ok", 9, cost_usd=0.25), labels={labels.LABEL_ROLE: "reviewer"}),
    ]
    page = run_page.render(view(run("r1"), steps=roles))
    assert "<dt>Cost by role</dt><dd>planner $0.5000, reviewer $0.5000</dd>" in page
    assert "<dt>Deadline</dt>" not in page
    plain = run_page.render(view(dataclasses.replace(run("r1"), deadline_at=3600.0)))
    assert "Cost by role" not in plain
    assert "<dt>Deadline</dt><dd>1970-01-01 01:00:00Z</dd>" in plain
