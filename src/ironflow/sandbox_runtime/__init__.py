"""The runtime that runs inside a sandbox session: :mod:`ironflow.sandbox_runtime.server`.

A file run by path (``python3 -I server.py``, with its sibling ``streams.py``), standard
library only, importing nothing of ironflow: backends find it with :data:`SERVER_PATH` and
show its directory to the sandbox. ``client`` is the ironflow side of the wire
(:class:`AsyncSandbox`), ``remote`` the sessions of an ``ironflow sandbox serve``
(:class:`RemoteSessions`), ``sync`` the blocking :class:`Sandbox`; they load on first use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.sandbox_runtime.client import AsyncSandbox
    from ironflow.sandbox_runtime.remote import RemoteSessions
    from ironflow.sandbox_runtime.sync import Sandbox

__all__ = ["SERVER_PATH", "AsyncSandbox", "RemoteSessions", "Sandbox"]

#: The host file of the runtime server, for a backend to bind into the sandbox.
SERVER_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")

__getattr__ = lazy_exports(__name__, {"client": ("AsyncSandbox",), "remote": ("RemoteSessions",), "sync": ("Sandbox",)})
