"""A dollar figure as ironflow shows it: 6 significant digits, no float noise (issue 31)."""

from __future__ import annotations

import doctest

from ironflow import results


def test_the_results_docstring_examples_run() -> None:
    outcome = doctest.testmod(results)
    assert outcome.attempted > 0
    assert outcome.failed == 0


def test_a_whole_or_zero_cost_stays_as_it_is() -> None:
    assert (results.shown_usd(0.0), results.shown_usd(2.0), results.shown_usd(1e-07)) == (0.0, 2.0, 1e-07)
