"""Workflow files for a worker: every @workflow.defn class of a file or module, or one line why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow import errors
from ironflow.temporal import load_workflows

EXAMPLE = Path(__file__).parents[3] / "examples" / "temporal" / "review.py"


def test_the_example_s_workflows_load_once_by_path() -> None:
    first = load_workflows(str(EXAMPLE))
    assert sorted(w.__name__ for w in first) == ["Review", "Summarise"]
    assert load_workflows(str(EXAMPLE)) == first  # one module per file: the sandbox passes it through


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "does not exist"),
        ("X = 1\n", "defines no @workflow.defn class"),
        ("raise RuntimeError('boom')\n", "failed to load: RuntimeError: boom"),
    ],
)
def test_a_file_that_is_missing_empty_or_broken_is_refused_by_name(
    tmp_path: Path, source: str | None, message: str
) -> None:
    path = tmp_path / "flows.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(errors.ConfigError, match=message):
        load_workflows(str(path))


def test_a_module_that_cannot_be_imported_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="workflow module no_such_module_x cannot be imported"):
        load_workflows("no_such_module_x")
