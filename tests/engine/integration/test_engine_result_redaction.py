"""A step's result and a run's output are stored redacted, as its transcript is (issue 34, L6):
a credential-shaped string the model or an op returned never reaches ``ironflow_steps.result``
(nor ``runs show -o json``, which reads it), on either store. The workspace patch stays exact."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import AsyncIterator

import pytest

from ironflow.engine import model
from ironflow.engine.store import Store, open_store
from ironflow.results import AgentResult, DebugMessage
from ironflow.secrets import REDACTED
from ironflow.testing import find_leaks
from ironflow.workspaces import WorkspaceChanges

API_KEY = "sk-ant-api03-" + "Fa4k3" * 14
PATCH = f"+KEY={API_KEY}\n".encode()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_credential_in_a_steps_result_is_stored_redacted(store: Store, store_url: str) -> None:
    run = await store.create_run(model.RunRecord(id=model.new_id(), workflow="w.py:flow", input={}))
    answer = AgentResult(
        value=f"here it is: {API_KEY}",
        duration_ms=1,
        debug_messages=(DebugMessage(text=f"echo {API_KEY}"),),
        workspace=WorkspaceChanges(PATCH, ()),
    )
    agent = model.StepRecord(run.id, 0, "ask", model.StepKind.AGENT, status=model.StepStatus.SUCCEEDED, result=answer)
    op = model.StepRecord(
        run.id, 1, "op", model.StepKind.OP, status=model.StepStatus.SUCCEEDED, result={"found": [API_KEY], API_KEY: 1}
    )
    await store.save_step(agent)
    await store.save_step(op)
    stored = await store.steps(run.id)
    result = stored[0].result
    assert isinstance(result, AgentResult)
    assert result.value == f"here it is: {REDACTED}"
    assert result.debug_messages == (DebugMessage(text=f"echo {REDACTED}"),)
    assert result.workspace is not None
    assert result.workspace.patch == PATCH  # the change itself, exact
    assert stored[1].result == {"found": [REDACTED], REDACTED: 1}
    rows = [dataclasses.replace(stored[0], result=dataclasses.replace(result, workspace=None)), stored[1]]
    assert find_leaks([API_KEY], [s.to_dict() for s in rows]) == []
    if store_url.startswith("sqlite:///"):  # the column itself, as `runs show -o json` reads it
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as conn:
            (raw,) = conn.execute("SELECT result FROM ironflow_steps WHERE position = 1").fetchone()
        assert API_KEY not in raw
