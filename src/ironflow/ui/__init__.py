"""``ironflow ui``: a server-rendered web dashboard of a store's runs, steps, transcripts and live sandboxes.

Layering (imports point down only): ``markup`` (escaping), ``formats``, ``queries`` and
``security`` (pure: values in, values out) → ``layout``, ``runs_page``, ``run_page``,
``sandboxes_page`` (pure: records in, an HTML string out) → ``handlers`` (aiohttp: reads the
store, calls a page, applies the policy) → ``app`` (the application, its middlewares and
:func:`~ironflow.ui.app.serve`) → ``cli/ui.py``. Nothing here writes to a store except through
:mod:`ironflow.engine.run_changes`, the same cancel and retry as ``ironflow runs``.
"""

from ironflow.ui.app import create_app, serve
from ironflow.ui.security import UiSecurity

__all__ = ["UiSecurity", "create_app", "serve"]
