"""Workflow references: a file or a module, and back; bad references are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow import errors
from ironflow.engine import loading

WORKFLOWS = Path(__file__).parent / "engine_workflows.py"


def test_a_file_reference_loads_and_maps_back_to_the_same_reference() -> None:
    workflow = loading.load_workflow(f"{WORKFLOWS}:linear")
    assert workflow.__name__ == "linear"
    assert loading.workflow_ref(workflow) == f"{WORKFLOWS}:linear"
    assert loading.load_workflow(f"{WORKFLOWS}:linear") is workflow  # loaded once per process


def test_a_relative_file_reference_becomes_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(WORKFLOWS.parent)
    workflow = loading.load_workflow("engine_workflows.py:parent")
    assert loading.workflow_ref(workflow) == f"{WORKFLOWS}:parent"


def test_a_module_reference_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "engine_loading_pkg_mod.py").write_text("async def flow(ctx, input):\n    return input\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    workflow = loading.load_workflow("engine_loading_pkg_mod:flow")
    assert loading.workflow_ref(workflow) == "engine_loading_pkg_mod:flow"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("flow", "workflow reference 'flow' must look like FILE.py:function or package.module:function"),
        (":flow", "workflow reference ':flow' must look like"),
        ("no_such_module_xyz:flow", "workflow module 'no_such_module_xyz' cannot be imported"),
        ("ironflow.engine.model:new_id", "'ironflow.engine.model:new_id' is not an async function"),
        ("ironflow.engine.model:missing", "workflow 'missing' not found in 'ironflow.engine.model'"),
        ("/nonexistent/flows.py:flow", "workflow file '/nonexistent/flows.py' does not exist"),
    ],
)
def test_a_bad_reference_is_refused_naming_the_problem(ref: str, message: str) -> None:
    with pytest.raises(errors.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loading.load_workflow(ref)
