"""Per-role cost tracking and caps against real stores (SQLite and PostgreSQL): the stores sum a
role's spend since a time, a worker refuses a step whose role spent its cap, ``runs show`` and the
UI's run page show the cost by role."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.engine.integration.test_engine_runs import get, invoked_steps, ref, run_all
from typer.testing import CliRunner

from ironflow import labels
from ironflow.cli.app import app
from ironflow.engine import budgets, model
from ironflow.engine.store import Store
from ironflow.testing.engine import RecordingProvider

ROLES = {"plan": "planner", "review": "reviewer", "again": "reviewer", "fix": "fixer"}


async def submit(store: Store, steps: list[str]) -> str:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=ref("linear"), input={"steps": steps, "roles": ROLES}))
    return run_id


async def test_a_roles_spend_sums_its_finished_agent_steps_since_a_time_over_every_run(store: Store) -> None:
    provider = RecordingProvider(costs={"plan": 0.5, "review": 0.25, "again": 0.125, "fix": 2.0, "untagged": 9.0})
    before = time.time()
    await submit(store, ["plan", "review", "untagged"])
    await submit(store, ["again", "fix"])
    await run_all(store, provider)
    spent = await store.role_spend("reviewer", before)
    assert (spent.cost_usd, spent.agent_steps) == (0.375, 2)
    assert (await store.role_spend("fixer", before)).cost_usd == 2.0
    assert await store.role_spend("reviewer", time.time() + 1) == model.Usage()  # nothing finished since then
    assert await store.role_spend("nobody", before) == model.Usage()


async def test_a_step_of_a_role_past_its_cap_is_refused_before_it_starts_and_not_retried(store: Store) -> None:
    provider = RecordingProvider(costs={"review": 0.25, "again": 0.25})
    caps = budgets.parse_role_caps(["reviewer=0.25/day"])
    first = await submit(store, ["plan", "review"])
    await run_all(store, provider, role_caps=caps)
    assert (await get(store, first)).status is model.RunStatus.SUCCEEDED  # 0 spent before: it ran
    second = await submit(store, ["again", "fix"])
    await run_all(store, provider, role_caps=caps)
    run = await get(store, second)
    assert run.status is model.RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "RoleBudgetExceeded"
    assert run.error["message"].startswith("role 'reviewer' has spent $0.25 of its $0.25 cap this day (since ")
    assert invoked_steps(provider) == ["plan", "review"]  # 'again' never started, 'fix' never came
    (refused,) = await store.steps(second)
    assert (refused.name, refused.status, refused.attempts) == ("again", model.StepStatus.FAILED, 1)
    assert refused.labels is not None
    assert refused.labels[labels.LABEL_ROLE] == "reviewer"


async def test_the_pods_of_a_step_carry_its_role(store: Store) -> None:
    provider = RecordingProvider()
    await submit(store, ["review"])
    await run_all(store, provider)
    (config,) = provider.configs
    assert config.pod_labels[labels.LABEL_ROLE] == "reviewer"


def test_runs_show_prints_the_cost_by_role_and_bad_caps_are_one_line(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    workflows = Path(ref("x").rsplit(":", 1)[0])
    cli = CliRunner()
    bad = cli.invoke(app, ["worker", "--store", store, "--role-cap", "reviewer=lots"])
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("error: --role-cap: role cap 'reviewer=lots' must look like ROLE=USD")
    queued = cli.invoke(app, ["run", f"{workflows}:linear", "--store", store, "--role-cap", "reviewer=1"])
    assert (queued.exit_code, queued.stderr) == (
        2,
        "error: --role-cap only applies with --wait (give the worker its caps)\n",
    )
    done = cli.invoke(
        app,
        ["run", f"{workflows}:linear", "--input", json.dumps({"steps": ["plan", "review"], "roles": ROLES}),
         "--wait", "--fake-model", "--store", store, "--role-cap", "reviewer=10/week"],
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    listed = json.loads(cli.invoke(app, ["runs", "list", "-o", "json", "--store", store]).stdout)
    run_id = listed[0]["id"]
    shown = cli.invoke(app, ["runs", "show", run_id, "--store", store])
    assert "by role   planner $" in shown.stdout
    assert "(1 step), reviewer $" in shown.stdout
    doc = json.loads(cli.invoke(app, ["runs", "show", run_id, "-o", "json", "--store", store]).stdout)
    assert list(doc["cost_by_role"]) == ["planner", "reviewer"]
    assert all(isinstance(v, float) for v in doc["cost_by_role"].values())
