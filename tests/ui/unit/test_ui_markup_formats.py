"""Escaping, the display formats and the runs page's query string, as values (no server)."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

from ironflow.engine import model
from ironflow.ui import formats, markup, queries
from ironflow.ui.markup import Safe, esc, fmt


@pytest.mark.parametrize("module", [markup, formats])
def test_docstring_examples_hold(module: ModuleType) -> None:
    assert doctest.testmod(module).failed == 0


def test_every_value_is_escaped_unless_it_is_markup_made_here() -> None:
    assert esc('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    assert esc(None) == ""
    inner = fmt("<b>{v}</b>", v="<i>")
    assert fmt("<p>{inner}</p>", inner=inner) == "<p><b>&lt;i&gt;</b></p>"  # escaped once, not twice
    assert fmt('<td title="{t}">', t='" onmouseover="x') == '<td title="&quot; onmouseover=&quot;x">'
    assert isinstance(fmt("{a}", a=1), Safe)
    assert (
        markup.query_url("/", {"status": "failed", "workflow": None, "before": "a&b"}) == "/?status=failed&before=a%26b"
    )
    assert markup.query_url("/", {"status": None}) == "/"


def test_a_runs_duration_is_queue_to_end_and_none_while_it_waits() -> None:
    def run(status: model.RunStatus) -> model.RunRecord:
        return model.RunRecord(id="r", workflow="w", input={}, status=status, created_at=100.0, updated_at=160.5)

    assert formats.run_duration(run(model.RunStatus.SUCCEEDED), now=999.0) == 60.5
    assert formats.run_duration(run(model.RunStatus.RUNNING), now=130.0) == 30.0
    assert formats.run_duration(run(model.RunStatus.PENDING), now=130.0) is None
    assert formats.timestamp(0) == "-"
    assert formats.timestamp(86400.0) == "1970-01-02 00:00:00Z"


def test_the_query_string_becomes_a_checked_value() -> None:
    assert queries.parse_runs_query({}) == queries.RunsQuery()
    assert queries.parse_runs_query({"status": "", "workflow": "  ", "limit": ""}) == queries.RunsQuery()
    parsed = queries.parse_runs_query(
        {"status": "failed", "workflow": " review.py:review ", "before": "01a2-x", "limit": "20"}
    )
    assert parsed == queries.RunsQuery(model.RunStatus.FAILED, "review.py:review", "01a2-x", 20)
    assert parsed.params(before="z") == {
        "status": "failed",
        "workflow": "review.py:review",
        "limit": "20",
        "before": "z",
    }


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            {"status": "done"},
            "status 'done' is not a run state; use one of pending, running, succeeded, failed, cancelled",
        ),
        ({"limit": "501"}, "limit '501' is not a number from 1 to 500"),
        ({"limit": "-1"}, "limit '-1' is not a number from 1 to 500"),
        ({"limit": "٣"}, "limit '٣' is not a number from 1 to 500"),
        ({"before": "x y"}, "before must be a run id (the cursor of the older link)"),
        ({"workflow": "w" * 1001}, "workflow is longer than 1000 characters"),
        ({"offset": "100"}, "unknown query parameter 'offset'; the runs page takes status, workflow, before, limit"),
    ],
)
def test_a_bad_value_is_refused_with_one_line(query: dict[str, str], message: str) -> None:
    with pytest.raises(queries.BadQuery) as caught:
        queries.parse_runs_query(query)
    assert str(caught.value) == message
