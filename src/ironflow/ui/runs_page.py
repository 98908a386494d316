"""The runs page: newest first, filtered by status and workflow, a page at a time, with each run's totals (pure).

A page of ``limit`` runs ends with an "older" link whose cursor is the last run's id
(``?before=ID``), so the next page is an index range from there, never an offset over every
run before it. Totals are each run's tree (its sub-workflow runs' agent steps too), as the
store sums them (``Store.run_totals``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ironflow.engine import model
from ironflow.ui import formats, layout
from ironflow.ui.markup import Safe, fmt, join, query_url
from ironflow.ui.queries import RunsQuery

__all__ = ["RunsView", "render", "status_badge"]


@dataclass(frozen=True)
class RunsView:
    """What the runs page shows: a page of runs (newest first), their totals, and whether older ones exist."""

    query: RunsQuery
    runs: Sequence[model.RunRecord]
    totals: Mapping[str, model.Usage]
    has_older: bool
    now: float


def status_badge(status: str) -> Safe:
    return fmt('<span class="status status-{s}">{s}</span>', s=status)


def _filters(query: RunsQuery) -> Safe:
    options = join(
        fmt('<option value="{v}"{sel}>{label}</option>', v=value, label=label,
            sel=Safe(" selected" if value == (str(query.status) if query.status else "") else ""))
        for value, label in [("", "any"), *((str(s), str(s)) for s in model.RunStatus)]
    )  # fmt: skip
    clear = Safe('<a href="/">clear</a>') if query.status or query.workflow else Safe("")
    return fmt(
        '<form class="filters" method="get" action="/">'
        '<label>Status <select name="status">{options}</select></label>'
        '<label>Workflow <input type="text" name="workflow" value="{workflow}" placeholder="review.py:review" '
        'size="32"></label><button type="submit">Filter</button>{clear}</form>',
        options=options, workflow=query.workflow or "", clear=clear,
    )  # fmt: skip


def _row(run: model.RunRecord, usage: model.Usage, query: RunsQuery, now: float) -> Safe:
    workflow_link = query_url("/", {**query.params(), "workflow": formats.short_workflow(run.workflow)})
    return fmt(
        '<tr class="run" data-run-id="{id}"><td class="mono"><a href="/runs/{id}">{short}</a></td>'
        '<td><a href="{wf_link}" title="{workflow}">{wf}</a></td><td>{badge}</td><td class="num">{attempt}</td>'
        '<td class="mono">{started}</td><td class="num">{took}</td><td class="num">{tokens}</td>'
        '<td class="num">{cost}</td></tr>',
        id=run.id, short=run.id[:13], wf_link=workflow_link, workflow=run.workflow,
        wf=formats.short_workflow(run.workflow), badge=status_badge(str(run.status)), attempt=run.attempt,
        started=formats.timestamp(run.created_at), took=formats.duration(formats.run_duration(run, now)),
        tokens=formats.tokens(usage.tokens), cost=formats.cost(usage.cost_usd),
    )  # fmt: skip


def render(view: RunsView) -> Safe:
    """The whole runs page."""
    query = view.query
    if view.runs:
        body = join(_row(r, view.totals.get(r.id, model.Usage()), query, view.now) for r in view.runs)
        table = fmt(
            '<table class="runs"><thead><tr><th>Run</th><th>Workflow</th><th>Status</th><th class="num">Attempt</th>'
            '<th>Queued (UTC)</th><th class="num">Duration</th><th class="num">Tokens</th><th class="num">Cost</th>'
            "</tr></thead><tbody>{body}</tbody></table>",
            body=body,
        )
    else:
        table = Safe('<p class="empty">No runs match.</p>')
    pager = Safe("")
    if view.has_older and view.runs:
        older = query_url("/", query.params(before=view.runs[-1].id))
        pager = fmt('<p class="pager"><a class="older" href="{href}">Older runs →</a></p>', href=older)
    elif query.before:
        pager = Safe('<p class="pager muted">No older runs. <a href="/">Newest</a></p>')
    return layout.page("Runs", join([_filters(query), table, pager]), active="runs")
