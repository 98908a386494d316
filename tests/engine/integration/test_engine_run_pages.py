"""The store's face for a dashboard, on SQLite and PostgreSQL: a page of runs by cursor and filters, and
a page of run trees' tokens and cost summed in one query (``run_totals``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ironflow.engine import model
from ironflow.engine.store import Store, open_store
from ironflow.results import AgentResult


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    await opened.open()
    yield opened
    await opened.close()


def agent_step(run_id: str, position: int, *, tokens: tuple[int, int], cost: float) -> model.StepRecord:
    result = AgentResult("ok", 10, cost_usd=cost, input_tokens=tokens[0], output_tokens=tokens[1])
    return model.StepRecord(
        run_id,
        position,
        f"agent {position}",
        model.StepKind.AGENT,
        status=model.StepStatus.SUCCEEDED,
        result=result,
        attempts=1,
        started_at=1.0,
    )


async def add_runs(store: Store, workflows: list[str]) -> list[str]:
    ids = []
    for workflow in workflows:
        run = await store.create_run(model.RunRecord(id=model.new_id(), workflow=workflow, input={}))
        ids.append(run.id)
    return ids


async def test_pages_of_runs_follow_the_cursor_newest_first_without_repeats(store: Store) -> None:
    ids = await add_runs(store, ["/w/review.py:review"] * 7)
    seen: list[str] = []
    before = None
    while True:
        page = await store.list_runs(before=before, limit=3)
        seen += [r.id for r in page]
        if len(page) < 3:
            break
        before = page[-1].id
    assert seen == ids[::-1]


async def test_the_workflow_filter_takes_the_whole_reference_or_its_end_after_a_slash(store: Store) -> None:
    review, other, similar = await add_runs(store, ["/w/review.py:review", "/w/fix.py:fix", "/w/preview.py:review"])
    for given in ("/w/review.py:review", "review.py:review", "w/review.py:review"):
        assert [r.id for r in await store.list_runs(workflow=given)] == [review], given
    assert [r.id for r in await store.list_runs(workflow="view.py:review")] == []  # not a part of a file name
    assert [r.id for r in await store.list_runs(workflow="fix.py:fix", status=model.RunStatus.PENDING)] == [other]
    assert await store.list_runs(workflow="fix.py:fix", status=model.RunStatus.FAILED) == []
    assert {r.id for r in await store.list_runs()} == {review, other, similar}


async def test_top_level_leaves_out_sub_workflow_runs(store: Store) -> None:
    (root,) = await add_runs(store, ["/w/review.py:review"])
    child = await store.start_child_run(
        model.RunRecord(
            id=model.new_id(), workflow="/w/review.py:summarise", input={}, root_run_id=root, parent_run_id=root
        )
    )
    assert [r.id for r in await store.list_runs()] == [child.id, root]
    assert [r.id for r in await store.list_runs(top_level=True)] == [root]


async def test_run_totals_sum_each_trees_agent_steps_and_nothing_else(store: Store) -> None:
    root, lonely = await add_runs(store, ["/w/review.py:review", "/w/review.py:review"])
    child = await store.start_child_run(
        model.RunRecord(id=model.new_id(), workflow="/w/r.py:sub", input={}, root_run_id=root, parent_run_id=root)
    )
    steps = [
        agent_step(root, 0, tokens=(100, 20), cost=0.25),
        agent_step(root, 1, tokens=(5, 1), cost=0.5),
        # An op and a sub-workflow step whose values look like usage count nothing; neither does a failed agent step.
        model.StepRecord(root, 2, "op", model.StepKind.OP, result={"cost_usd": 9, "input_tokens": 9}, started_at=1.0),
        model.StepRecord(
            root, 3, "sub", model.StepKind.SUB_WORKFLOW, result={"cost_usd": 9}, child_run_id=child.id, started_at=1.0
        ),
        model.StepRecord(
            root,
            4,
            "broke",
            model.StepKind.AGENT,
            status=model.StepStatus.FAILED,
            started_at=1.0,
            error={"type": "ProcessFailed", "message": "x", "retryable": True},
        ),
        agent_step(child.id, 0, tokens=(1000, 300), cost=1.0),
    ]
    for step in steps:
        await store.save_step(step)
    totals = await store.run_totals([root, lonely, "no-such-run"])
    assert totals == {
        root: model.Usage(input_tokens=1105, output_tokens=321, cost_usd=1.75, agent_steps=3),
        lonely: model.Usage(),
        "no-such-run": model.Usage(),
    }
    in_python = sum(
        (model.Usage.of_step(s) for s in await store.steps(root) + await store.steps(child.id)), model.Usage()
    )
    assert totals[root] == in_python
    assert totals[root].tokens == 1426
    assert await store.run_totals([]) == {}
