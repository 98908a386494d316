"""HTML built from Python strings where every value is escaped unless it is already markup (pure).

The one rule: a :class:`Safe` string is HTML this package made; anything else put into a page
goes through :func:`esc`. :func:`fmt` fills a template's ``{name}`` fields, escaping each value
that is not :class:`Safe`, so a page function never calls ``html.escape`` itself and never
concatenates a raw value into markup.

>>> fmt('<td title="{t}">{v}</td>', t='a"b', v="<script>")
'<td title="a&quot;b">&lt;script&gt;</td>'
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import urlencode

__all__ = ["Safe", "esc", "fmt", "join", "query_url"]


class Safe(str):
    """HTML this package made (escaped already); never build one from outside text."""

    __slots__ = ()


def esc(value: object) -> Safe:
    """``value`` as HTML text (quotes too, so it is safe in an attribute); :class:`Safe` stays as is."""
    if isinstance(value, Safe):
        return value
    return Safe(html.escape("" if value is None else str(value), quote=True))


def fmt(template: str, /, **values: object) -> Safe:
    """``template`` with each ``{name}`` replaced by its escaped value. Quotes are escaped too,
    so a field inside a double-quoted attribute (``title="{t}"``) cannot leave it."""
    return Safe(template.format(**{name: esc(value) for name, value in values.items()}))


def join(parts: Iterable[Safe], sep: str = "") -> Safe:
    """Markup pieces one after the other."""
    return Safe(sep.join(parts))


def query_url(path: str, params: dict[str, str | None]) -> str:
    """``path`` with the non-empty ``params`` as a query string (a value :func:`fmt` escapes)."""
    kept = {k: v for k, v in params.items() if v}
    return f"{path}?{urlencode(kept)}" if kept else path
