"""The live page: what ``ironflow ps`` lists, from the same report (:func:`ironflow.engine.running.report`) (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ironflow.ui import formats, layout
from ironflow.ui.markup import Safe, fmt, join

__all__ = ["render"]


def _where(sandbox: Mapping[str, Any] | None) -> Safe:
    if sandbox is None:
        return Safe('<span class="muted">in the worker</span>')
    if "child_run_id" in sandbox:
        return fmt('sub-workflow run <a class="mono" href="/runs/{id}">{id}</a>', id=sandbox["child_run_id"])
    if "pods" in sandbox:
        return fmt("pods <code>-l {s}</code>", s=sandbox["pods"])
    if "local_dirs" not in sandbox:
        return fmt("local, on {h}", h=sandbox.get("host") or "an unnamed worker")
    return join(fmt("<code>{d}</code><br>", d=d) for d in sandbox["local_dirs"]) or fmt(
        "local, pid {p}: no live sandbox dir", p=sandbox["pid"]
    )


def _runs(report: Mapping[str, Any]) -> Safe:
    if not report["runs"]:
        return Safe('<p class="empty">No run is running in the store.</p>')
    rows = []
    for run in report["runs"]:
        steps = run["steps"] or [None]
        for index, step in enumerate(steps):
            head = Safe("<td></td><td></td><td></td><td></td><td></td>")
            if index == 0:
                head = fmt(
                    '<td class="mono"><a href="/runs/{id}">{short}</a></td><td>{wf}</td><td>{backend}</td>'
                    '<td class="mono">{worker}</td><td class="num">{age}</td>',
                    id=run["id"], short=run["id"][:13], wf=formats.short_workflow(run["workflow"]),
                    backend=run["backend"], worker=run["worker"] or "-", age=formats.duration(run["age_s"]),
                )  # fmt: skip
            tail = Safe("<td>-</td><td>-</td><td>-</td>")
            if step is not None:
                tail = fmt('<td>{p} {name}</td><td class="num">{running}</td><td>{where}</td>',
                           p=step["position"], name=step["name"], running=formats.duration(step["running_s"]),
                           where=_where(step["sandbox"]))  # fmt: skip
            rows.append(join([Safe('<tr class="live-run">'), head, tail, Safe("</tr>")]))
    return fmt(
        '<table><thead><tr><th>Run</th><th>Workflow</th><th>Backend</th><th>Worker</th><th class="num">Age</th>'
        '<th>Step</th><th class="num">Running</th><th>Sandbox</th></tr></thead><tbody>{rows}</tbody></table>',
        rows=join(rows),
    )


def _local(report: Mapping[str, Any]) -> Safe:
    if not report["local_sandboxes"]:
        return Safe('<p class="empty">No live local sandbox on this machine.</p>')
    rows = join(
        fmt('<tr><td class="mono">{path}</td><td class="num">{pid}</td><td class="num">{age}</td><td>{runs}</td></tr>',
            path=d["path"], pid=d["pid"], age=formats.duration(d["age_s"]),
            runs=join(fmt('<a class="mono" href="/runs/{r}">{s}</a> ', r=r, s=r[:13]) for r in d["runs"]) or "-")
        for d in report["local_sandboxes"]
    )  # fmt: skip
    return fmt(
        '<table><thead><tr><th>Directory</th><th class="num">PID</th><th class="num">Age</th>'
        "<th>Runs of that worker</th></tr></thead><tbody>{rows}</tbody></table>",
        rows=rows,
    )


def render(report: Mapping[str, Any]) -> Safe:
    """The live page of a :func:`~ironflow.engine.running.report`."""
    body = join([Safe("<h2>Running runs and steps</h2>"), _runs(report),
                 Safe("<h2>Local sandboxes on this machine</h2>"), _local(report)])  # fmt: skip
    return layout.page("Live sandboxes", body, active="sandboxes", refresh_s=5)
