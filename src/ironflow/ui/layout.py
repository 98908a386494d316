"""The frame every page shares: head, navigation, the stylesheet link; error and sign-in pages (pure).

A page function returns its body as :class:`~ironflow.ui.markup.Safe`; :func:`page` wraps it.
A page of a run that is still moving refreshes itself (``refresh_s``, a meta refresh: no script).
"""

from __future__ import annotations

from typing import Final

from ironflow.ui.markup import Safe, fmt, join

__all__ = ["STYLESHEET_PATH", "error_page", "hidden_csrf", "page", "sign_in_page"]

STYLESHEET_PATH: Final = "/static/style.css"
_NAV: Final = (("runs", "/", "Runs"), ("sandboxes", "/sandboxes", "Live sandboxes"))


def hidden_csrf(token: str) -> Safe:
    """The form field a POST carries (:mod:`ironflow.ui.security`)."""
    return fmt('<input type="hidden" name="csrf" value="{t}">', t=token)


def page(title: str, body: Safe, *, active: str = "", refresh_s: int | None = None) -> Safe:
    """A whole HTML document: ``title`` in the tab and as the heading, ``body`` under it."""
    nav = join(
        fmt(
            '<a href="{href}"{cls}>{label}</a>',
            href=href,
            label=label,
            cls=Safe(' class="active"' if key == active else ""),
        )
        for key, href, label in _NAV
    )
    refresh = fmt('<meta http-equiv="refresh" content="{s}">', s=refresh_s) if refresh_s else Safe("")
    return fmt(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">{refresh}'
        '<title>{title} · ironflow</title><link rel="stylesheet" href="{css}"></head>'
        '<body><header><span class="brand">ironflow</span><nav>{nav}</nav></header>'
        "<main><h1>{title}</h1>{body}</main></body></html>\n",
        refresh=refresh, title=title, css=STYLESHEET_PATH, nav=nav, body=body,
    )  # fmt: skip


def error_page(status: int, message: str) -> Safe:
    """The page of a refused or failed request: its status and the one line that says why."""
    titles = {400: "Bad request", 401: "Sign in", 403: "Forbidden", 404: "Not found", 409: "Not possible now"}
    body = fmt('<p class="error-line">{m}</p><p><a href="/">All runs</a></p>', m=message)
    return page(titles.get(status, f"Error {status}"), body)


def sign_in_page(csrf: str, *, wrong: bool = False) -> Safe:
    """The form that trades the admin token for a session cookie."""
    note = Safe('<p class="error-line">That token is not the admin token.</p>') if wrong else Safe("")
    form = fmt(
        '{note}<form method="post" action="/login" class="sign-in">{csrf}'
        '<label>Admin token <input type="password" name="token" autocomplete="current-password" required></label>'
        '<button type="submit">Sign in</button></form>',
        note=note, csrf=hidden_csrf(csrf),
    )  # fmt: skip
    return page("Sign in", form)
