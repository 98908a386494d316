"""The runtime that runs inside a sandbox session: :mod:`ironflow.sandbox_runtime.server`.

A file run by path (``python3 -I server.py``, or ``entry.py``, which imports it so that its bytecode
is cached; with its siblings ``streams.py``, ``startup.py``, ``confine.py``, ``delivery.py``, and
``lite.py`` and ``popen.py``, which stand in for the standard modules that import dozens of others),
standard library only, importing nothing of ironflow: backends find it with :data:`SERVER_PATH`
and show its directory to the sandbox. The ironflow side of the wire moved to
:mod:`ironflow.sessions` (``client``, ``remote``, ``sync``): ``AsyncSandbox``,
``RemoteSessions`` and ``Sandbox`` still resolve here, with a DeprecationWarning.
"""

from __future__ import annotations

import functools
import os
from typing import Final

from ironflow._lazy import deprecated_exports

__all__ = ["ENTRY", "SERVER_PATH", "SESSION_ENV", "compiled"]

#: The host file of the runtime server, for a backend to bind into the sandbox.
SERVER_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
#: The file of :data:`SERVER_PATH`'s directory a backend that shows that directory runs by path.
ENTRY: Final = "entry.py"
#: The variable naming the file of variables a session's commands get after its start
#: (``server.SESSION_ENV``: the server imports nothing of ironflow; a test keeps them equal).
SESSION_ENV: Final = "IRONFLOW_SESSION_ENV_FILE"


@functools.cache
def compiled() -> None:
    """The runtime's bytecode written to its ``__pycache__`` (once a process, where the directory is
    writable: a checkout; an installed package has it from its install). A sandbox shows the
    directory read-only, so the Python there could never keep what it compiled."""
    import compileall

    compileall.compile_dir(os.path.dirname(SERVER_PATH), maxlevels=0, quiet=2)


__getattr__ = deprecated_exports(
    __name__,
    {
        "ironflow.sessions.client": ("AsyncSandbox",),
        "ironflow.sessions.remote": ("RemoteSessions",),
        "ironflow.sessions.sync": ("Sandbox",),
    },
    instead="ironflow.sessions",
)
