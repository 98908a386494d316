"""The UI's request handlers: read the store, build a page's view, answer its HTML (the I/O edge).

Each handler checks its input (:mod:`ironflow.ui.queries`, the CSRF field), reads what the page
shows, and hands a value to a pure page function. A change (cancel, retry) goes through
:mod:`ironflow.engine.run_changes`, the same as ``ironflow runs cancel/retry``, then redirects
back to the run's page (POST, redirect, GET: a reload never posts twice).
"""

from __future__ import annotations

import time
from importlib import resources
from typing import Final

from aiohttp import web

from ironflow import errors
from ironflow.engine import model, run_changes, run_refs, running
from ironflow.engine.store import Store
from ironflow.ui import layout, queries, run_page, runs_page, sandboxes_page
from ironflow.ui.markup import Safe
from ironflow.ui.security import CSRF_FIELD, SESSION_COOKIE, UiSecurity

__all__ = ["TRANSCRIPT_CHUNKS", "Handlers", "html_response"]

#: Most transcript chunks one run page shows (``ironflow logs`` prints the rest).
TRANSCRIPT_CHUNKS: Final = 5000
_PAGE: Final = 500


def html_response(body: Safe, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


def error_response(status: int, message: str) -> web.Response:
    return html_response(layout.error_page(status, message), status)


def _field(form: object, name: str) -> str | None:
    value = form.get(name) if hasattr(form, "get") else None
    return value if isinstance(value, str) else None


class Handlers:
    """The pages of one store, under one :class:`~ironflow.ui.security.UiSecurity`."""

    def __init__(
        self, store: Store, security: UiSecurity, *, base_dir: str = "", local_dirs: running.LocalDirs | None = None
    ) -> None:
        self.store = store
        self.local_dirs = local_dirs
        self.security = security
        self.base_dir = base_dir
        self.stylesheet = (resources.files("ironflow.ui") / "static" / "style.css").read_text()

    async def runs(self, request: web.Request) -> web.Response:
        try:
            query = queries.parse_runs_query(request.query)
        except queries.BadQuery as exc:
            return error_response(400, str(exc))
        found = await self.store.list_runs(
            status=query.status, workflow=query.workflow, top_level=True, before=query.before, limit=query.limit + 1
        )
        shown = found[: query.limit]
        totals = await self.store.run_totals([r.id for r in shown])
        view = runs_page.RunsView(query, shown, totals, has_older=len(found) > query.limit, now=time.time())
        return html_response(runs_page.render(view))

    async def _transcript(self, run_id: str) -> tuple[list[model.TranscriptChunk], bool]:
        """The run's stored chunks, at most :data:`TRANSCRIPT_CHUNKS`; and whether more were left out."""
        chunks: list[model.TranscriptChunk] = []
        while len(chunks) < TRANSCRIPT_CHUNKS:
            after = chunks[-1].seq if chunks else 0
            page = await self.store.transcript(run_id, after=after, limit=_PAGE)
            chunks += page
            if len(page) < _PAGE:
                return chunks, False
        return chunks[:TRANSCRIPT_CHUNKS], True

    async def run(self, request: web.Request) -> web.Response:
        found = await run_refs.match_run(self.store, request.match_info["run_id"])
        run = found.run
        if run is None:  # none is a 404; a start of several runs' ids is the address's fault: 400
            return error_response(400 if found.ambiguous else 404, str(found.problem))
        if run.id != found.ref:  # a start of its id, as the CLI takes it: the page has one address
            raise web.HTTPSeeOther(f"/runs/{run.id}")
        steps = await self.store.steps(run.id)
        chunks, cut = await self._transcript(run.id)
        children = {}
        for step in steps:
            if step.child_run_id is not None and (child := await self.store.get_run(step.child_run_id)) is not None:
                children[child.id] = child
        if run.parent_run_id is None:
            usage = (await self.store.run_totals([run.id]))[run.id]
        else:  # a sub-workflow's page: its own steps (its tree's totals are its root's)
            usage = sum((model.Usage.of_step(s) for s in steps), model.Usage())
        view = run_page.RunView(
            run=run,
            steps=steps,
            chunks=chunks,
            usage=usage,
            now=time.time(),
            usage_of_tree=run.parent_run_id is None,
            children=children,
            pod_selectors={s.position: selector for s in steps if (selector := running.step_pod_selector(run, s))},
            refusals={str(a): run_changes.refusal(run, a) for a in run_changes.RunAction},
            csrf={str(a): self.security.csrf_token(f"/runs/{run.id}/{a}") for a in run_changes.RunAction},
            transcript_cut=cut,
            base_dir=self.base_dir,
        )
        return html_response(run_page.render(view))

    async def change(self, request: web.Request) -> web.Response:
        action = run_changes.RunAction(request.match_info["action"])  # the route takes only these
        form = await request.post()
        if not self.security.csrf_ok(request.path, _field(form, CSRF_FIELD)):
            return error_response(403, "the form's CSRF token is missing or wrong; reload the page and try again")
        run_id = request.match_info["run_id"]
        run = await self.store.get_run(run_id)
        if run is None:
            return error_response(404, f"no run {run_id} in the store")
        try:
            await run_changes.change_run(self.store, run, action)
        except errors.RunStateConflict as exc:
            return error_response(409, exc.message)
        raise web.HTTPSeeOther(f"/runs/{run.id}")

    async def sandboxes(self, request: web.Request) -> web.Response:
        return html_response(sandboxes_page.render(await running.gather(self.store, local_dirs=self.local_dirs)))

    async def style(self, request: web.Request) -> web.Response:
        return web.Response(text=self.stylesheet, content_type="text/css", charset="utf-8")

    async def sign_in_form(self, request: web.Request) -> web.Response:
        if not self.security.sign_in_required:
            raise web.HTTPSeeOther("/")
        return html_response(layout.sign_in_page(self.security.csrf_token("/login")), 401)

    async def sign_in(self, request: web.Request) -> web.Response:
        if not self.security.sign_in_required:
            raise web.HTTPSeeOther("/")
        form = await request.post()
        if not self.security.csrf_ok("/login", _field(form, CSRF_FIELD)):
            return error_response(403, "the form's CSRF token is missing or wrong; reload the page and try again")
        if not self.security.token_ok(_field(form, "token")):
            return html_response(layout.sign_in_page(self.security.csrf_token("/login"), wrong=True), 401)
        answer = web.HTTPSeeOther("/")
        answer.set_cookie(SESSION_COOKIE, self.security.session_value(), httponly=True, samesite="Strict", path="/")
        raise answer
