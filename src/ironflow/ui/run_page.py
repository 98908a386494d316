"""A run's page: its facts and totals, its steps as a timeline, each step's transcript as turns, and
the cancel and retry buttons (pure).

Transcripts are the stored ones (redacted before they were stored), condensed line by line
by :func:`ironflow.claude.turns.describe`, as ``ironflow logs`` prints them; a turn's kind
picks its style. A button is shown only when the run's state allows it (the handler passes the
refusals of :mod:`ironflow.engine.run_changes`), and each posts with its CSRF field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ironflow.claude import turns
from ironflow.engine import budgets, model
from ironflow.ui import formats, layout
from ironflow.ui.markup import Safe, fmt, join
from ironflow.ui.runs_page import status_badge

__all__ = ["RunView", "render", "turn_kind", "turn_lines"]

#: Seconds between reloads of the page of a running run.
REFRESH_S: Final = 5
_BAR_WIDTH: Final = 1000
_CANCEL_REQUESTED: Final = Safe(' <span class="muted">cancel requested</span>')


@dataclass(frozen=True)
class RunView:
    """Everything a run's page shows; the handler reads it from the store."""

    run: model.RunRecord
    steps: Sequence[model.StepRecord]
    chunks: Sequence[model.TranscriptChunk]
    usage: model.Usage
    now: float
    #: The run's tree (a top-level run: its sub-workflows' steps too), or only its own steps.
    usage_of_tree: bool = True
    children: Mapping[str, model.RunRecord] = field(default_factory=dict)
    pod_selectors: Mapping[int, str | None] = field(default_factory=dict)
    #: Why cancel / retry is refused now (None: the button is shown), by action name.
    refusals: Mapping[str, str | None] = field(default_factory=dict)
    #: The CSRF field of each action's form, by action name.
    csrf: Mapping[str, str] = field(default_factory=dict)
    transcript_cut: bool = False
    #: Where the UI was started: workflow files under it are named relative to it.
    base_dir: str = ""


def turn_kind(line: str) -> str:
    """The style of one condensed stdout line (``assistant``, ``tool``, ``result``, …)."""
    stripped = line.lstrip()
    for prefix, kind in (
        ("assistant:", "assistant"), ("→", "tool"), ("←", "tool-result"), ("✗", "error"),
        ("result (error)", "error"), ("result", "result"), ("thinking:", "thinking"), ("session started", "session"),
    ):  # fmt: skip
        if stripped.startswith(prefix):
            return kind
    return "other"


def turn_lines(chunk: model.TranscriptChunk) -> list[tuple[str, str]]:
    """A chunk's lines as ``(kind, text)`` turns: stdout condensed by ``turns.describe``."""
    out: list[tuple[str, str]] = []
    for line in chunk.lines:
        if chunk.stream is model.TranscriptStream.STDOUT:
            out += [(turn_kind(said), said.strip()) for said in turns.describe(line)]
        elif chunk.stream is model.TranscriptStream.STDERR:
            out.append(("stderr", f"stderr: {line}"))
        else:
            out.append(("ironflow", f"[ironflow] {line}"))
    return out


def _facts(view: RunView) -> Safe:
    run = view.run
    rows: list[tuple[str, Safe | str]] = [
        ("Status", join([status_badge(str(run.status)),
                         _CANCEL_REQUESTED if run.cancel_requested else Safe("")])),
        ("Workflow", fmt('<code title="{full}">{w}</code>', full=run.workflow,
                         w=formats.workflow_label(run.workflow, view.base_dir))),
        ("Backend", run.backend or "local"),
        ("Attempt", str(run.attempt)),
        ("Queued", formats.timestamp(run.created_at)),
        ("Duration", formats.duration(formats.run_duration(run, view.now))),
        ("Tokens", f"{formats.tokens(view.usage.tokens)} ({view.usage.input_tokens:,} in, "
                   f"{view.usage.output_tokens:,} out)"),
        ("Cost", formats.cost(view.usage.cost_usd) + (" (with its sub-workflows)" if view.usage_of_tree else "")),
    ]  # fmt: skip
    by_role = budgets.usage_by_role(view.steps)
    if by_role:
        rows.append(("Cost by role", ", ".join(f"{role} {formats.cost(u.cost_usd)}" for role, u in by_role.items())))
    if run.deadline_at is not None:
        rows.append(("Deadline", formats.timestamp(run.deadline_at)))
    if run.parent_run_id:
        rows.insert(1, ("Parent run", fmt('<a class="mono" href="/runs/{p}">{p}</a>', p=run.parent_run_id)))
    if run.error:
        rows.append(("Error", fmt('<span class="error-line">{t}: {m}</span>', t=run.error.get("type", "?"),
                                  m=run.error.get("message", ""))))  # fmt: skip
    return fmt(
        '<dl class="facts">{rows}</dl>',
        rows=join(fmt("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in rows),
    )


def _actions(view: RunView) -> Safe:
    forms = []
    for action, label, css in (("cancel", "Cancel run", "danger"), ("retry", "Retry run", "")):
        if action in view.refusals and view.refusals[action] is None:
            forms.append(fmt(
                '<form method="post" action="/runs/{id}/{action}">{csrf}'
                '<button type="submit" class="{css}" name="action" value="{action}">{label}</button></form>',
                id=view.run.id, action=action, csrf=layout.hidden_csrf(view.csrf.get(action, "")), css=css, label=label,
            ))  # fmt: skip
    return fmt('<div class="actions">{f}</div>', f=join(forms)) if forms else Safe("")


def _bar(step: model.StepRecord, start: float, span: float, now: float) -> Safe:
    left = (step.started_at - start) / span * _BAR_WIDTH
    width = max(formats.step_duration(step, now) / span * _BAR_WIDTH, 4)
    return fmt(
        '<svg class="bar" viewBox="0 0 {w} 10" preserveAspectRatio="none" aria-hidden="true">'
        '<rect class="{status}" x="{x}" y="0" width="{width}" height="10"></rect></svg>',
        w=_BAR_WIDTH, status=str(step.status), x=f"{left:.0f}", width=f"{width:.0f}",
    )  # fmt: skip


def _where(view: RunView, step: model.StepRecord) -> Safe:
    if step.child_run_id is not None:
        child = view.children.get(step.child_run_id)
        badge = status_badge(str(child.status)) if child is not None else Safe("")
        return fmt('sub-workflow run <a class="mono" href="/runs/{id}">{short}</a> {badge}',
                   id=step.child_run_id, short=step.child_run_id[:13], badge=badge)  # fmt: skip
    if step.kind is not model.StepKind.AGENT:
        return Safe('<span class="muted">in the worker</span>')
    selector = view.pod_selectors.get(step.position)
    env = getattr(step.result, "environment_id", None)
    place = fmt("pods <code>-l {s}</code>", s=selector) if selector else Safe("single-use local sandbox")
    return join([place, fmt(' <span class="muted">environment {e}</span>', e=env) if env else Safe("")])


def _step_row(view: RunView, step: model.StepRecord, start: float, span: float, has_transcript: bool) -> Safe:
    usage = model.Usage.of_step(step)
    error = Safe("")
    if step.error:
        error = fmt('<div class="error-line">{t}: {m}</div>', t=step.error.get("type", "?"),
                    m=step.error.get("message", ""))  # fmt: skip
    name = fmt('<a href="#transcript-{p}">{n}</a>', p=step.position, n=step.name) if has_transcript else step.name
    return fmt(
        '<tr class="step" data-position="{p}"><td class="num">{p}</td><td>{name}{bar}{error}</td><td>{kind}</td>'
        "<td>{backend}</td><td>{where}</td><td class=\"num\">{attempts}</td><td>{badge}</td>"
        '<td class="mono">{started}</td><td class="num">{took}</td><td class="num">{tokens}</td>'
        '<td class="num">{cost}</td></tr>',
        p=step.position, name=name, bar=_bar(step, start, span, view.now), error=error, kind=str(step.kind),
        backend=(view.run.backend or "local") if step.kind is model.StepKind.AGENT else "-",
        where=_where(view, step), attempts=step.attempts, badge=status_badge(str(step.status)),
        started=formats.timestamp(step.started_at), took=formats.duration(formats.step_duration(step, view.now)),
        tokens=formats.tokens(usage.tokens), cost=formats.cost(usage.cost_usd),
    )  # fmt: skip


def _timeline(view: RunView, with_transcript: set[int]) -> Safe:
    if not view.steps:
        return Safe('<p class="empty">No step has started yet.</p>')
    start = min(s.started_at for s in view.steps)
    end = max(s.finished_at if s.finished_at is not None else view.now for s in view.steps)
    span = max(end - start, 1e-3)
    rows = join(_step_row(view, s, start, span, s.position in with_transcript) for s in view.steps)
    return fmt(
        '<table class="steps"><thead><tr><th class="num">#</th><th>Step</th><th>Kind</th><th>Backend</th>'
        '<th>Pod or sandbox</th><th class="num">Attempts</th><th>Status</th><th>Started (UTC)</th>'
        '<th class="num">Duration</th><th class="num">Tokens</th><th class="num">Cost</th></tr></thead>'
        "<tbody>{rows}</tbody></table>",
        rows=rows,
    )


def _transcripts(view: RunView) -> Safe:
    by_step: dict[int, dict[int, list[tuple[str, str]]]] = {}
    names: dict[int, str] = {}
    for chunk in view.chunks:
        by_step.setdefault(chunk.position, {}).setdefault(chunk.attempt, []).extend(turn_lines(chunk))
        names[chunk.position] = chunk.step
    if not by_step:
        return Safe('<p class="empty">No stored transcript.</p>')
    sections = []
    for position in sorted(by_step):
        attempts = join(
            fmt('<h3>attempt {a}</h3><ol class="turns">{items}</ol>', a=attempt,
                items=join(fmt('<li class="turn turn-{k}">{t}</li>', k=kind, t=text) for kind, text in lines))
            for attempt, lines in sorted(by_step[position].items())
        )  # fmt: skip
        sections.append(fmt(
            '<details class="transcript" id="transcript-{p}" open>'
            "<summary>Step {p} {name}</summary>{attempts}</details>",
            p=position, name=names[position], attempts=attempts,
        ))  # fmt: skip
    cut = Safe('<p class="muted">The transcript is longer than a page shows: <code>ironflow logs</code> '
               "prints all of it.</p>") if view.transcript_cut else Safe("")  # fmt: skip
    return join([*sections, cut])


def render(view: RunView) -> Safe:
    """The whole page of one run."""
    with_transcript = {c.position for c in view.chunks}
    body = join([
        _facts(view), _actions(view), Safe("<h2>Steps</h2>"), _timeline(view, with_transcript),
        Safe("<h2>Transcripts</h2>"), _transcripts(view),
    ])  # fmt: skip
    refresh = REFRESH_S if view.run.status is model.RunStatus.RUNNING else None
    return layout.page(f"Run {view.run.id}", body, active="runs", refresh_s=refresh)
