"""The runtime that runs inside a sandbox session: :mod:`ironflow.sandbox_runtime.server`.

A file run by path (``python3 -I server.py``, with its siblings ``streams.py``, ``startup.py``,
``confine.py`` and ``delivery.py``), standard library only, importing nothing of ironflow: backends find it
with :data:`SERVER_PATH` and show its directory to the sandbox. The ironflow side of the wire moved to
:mod:`ironflow.sessions` (``client``, ``remote``, ``sync``): ``AsyncSandbox``,
``RemoteSessions`` and ``Sandbox`` still resolve here, with a DeprecationWarning.
"""

from __future__ import annotations

import os
from typing import Final

from ironflow._lazy import deprecated_exports

__all__ = ["SERVER_PATH", "SESSION_ENV"]

#: The host file of the runtime server, for a backend to bind into the sandbox.
SERVER_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
#: The variable naming the file of variables a session's commands get after its start
#: (``server.SESSION_ENV``: the server imports nothing of ironflow; a test keeps them equal).
SESSION_ENV: Final = "IRONFLOW_SESSION_ENV_FILE"

__getattr__ = deprecated_exports(
    __name__,
    {
        "ironflow.sessions.client": ("AsyncSandbox",),
        "ironflow.sessions.remote": ("RemoteSessions",),
        "ironflow.sessions.sync": ("Sandbox",),
    },
    instead="ironflow.sessions",
)
