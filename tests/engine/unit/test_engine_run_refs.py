"""The refusals of a run name the CLI and the UI share (pure)."""

from __future__ import annotations

import doctest

from ironflow.engine import run_refs


def test_the_run_refs_docstring_examples_run() -> None:
    assert doctest.testmod(run_refs).failed == 0


def test_an_ambiguous_start_names_five_and_says_there_are_more() -> None:
    found = run_refs.RunMatch("01", candidates=tuple(f"01-{i}" for i in range(6)))
    assert found.ambiguous
    assert found.problem == (
        "run id 01 is the start of several runs' ids (01-0, 01-1, 01-2, 01-3, 01-4, …); give more of it"
    )
    assert not run_refs.RunMatch("01", candidates=("01-0",)).ambiguous
