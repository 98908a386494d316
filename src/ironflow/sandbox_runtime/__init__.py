"""The runtime that runs inside a sandbox session: :mod:`ironflow.sandbox_runtime.server`.

A file run by path (``python3 -I server.py``, or ``entry.py``, which imports it so that its bytecode
is cached; with its siblings ``streams.py``, ``startup.py``, ``confine.py``, ``delivery.py``, and
``lite.py`` and ``popen.py``, which stand in for the standard modules that import dozens of others),
standard library only, importing nothing of ironflow: backends find it with :data:`SERVER_PATH`
and show its directory to the sandbox, or, under gVisor, one file of its code packed
(:func:`packed`, started by ``packed_start.py``). The ironflow side of the wire moved to
:mod:`ironflow.sessions` (``client``, ``remote``, ``sync``): ``AsyncSandbox``,
``RemoteSessions`` and ``Sandbox`` still resolve here, with a DeprecationWarning.
"""

from __future__ import annotations

import functools
import os
from typing import Final

from ironflow._lazy import deprecated_exports

__all__ = ["ENTRY", "PACKED_START", "SERVER_PATH", "SESSION_ENV", "compiled", "packed", "packed_start_source"]

#: The host file of the runtime server, for a backend to bind into the sandbox.
SERVER_PATH: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
#: The file of :data:`SERVER_PATH`'s directory a backend that shows that directory runs by path.
ENTRY: Final = "entry.py"
#: The file of :data:`SERVER_PATH`'s directory whose text starts the runtime from its packed code
#: (``python3 -I -S -c TEXT PACKED ARGS``): a backend that shows the sandbox one file, not the directory.
PACKED_START: Final = "packed_start.py"
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


#: The standard modules the runtime imports at its start from a file (not frozen, not C): packed too.
_PACKED_STANDARD: Final = ("__future__",)


@functools.cache
def packed() -> bytes:
    """Every module of the runtime's directory, compiled, in one file's bytes for
    :data:`PACKED_START` to read, with the few standard ones it would read from files at its start
    (the sandbox's Python is this one): this Python's cache tag on a line, then, marshalled, each
    module's marshalled code by its name (from ``__pycache__`` where it is current; once a process)."""
    import importlib.machinery
    import importlib.util
    import marshal
    import sys

    folder = os.path.dirname(SERVER_PATH)
    own = [name for name in sorted(os.listdir(folder)) if name.endswith(".py")]
    skipped = ("__init__.py", ENTRY, PACKED_START)
    paths = {name[: -len(".py")]: os.path.join(folder, name) for name in own if name not in skipped}
    for name in _PACKED_STANDARD:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin is not None and spec.origin.endswith(".py"):
            paths[name] = spec.origin
    loader = importlib.machinery.SourceFileLoader
    codes = {name: marshal.dumps(loader(name, path).get_code(name)) for name, path in paths.items()}
    return sys.implementation.cache_tag.encode() + b"\n" + marshal.dumps(codes)


@functools.cache
def packed_start_source() -> str:
    """The text of :data:`PACKED_START` from its first import on, which a sandbox runs with ``-c``:
    its docstring would only lengthen every ``ps`` line of the runtime (once a process)."""
    with open(os.path.join(os.path.dirname(SERVER_PATH), PACKED_START), encoding="utf-8") as source:
        text = source.read()
    return text[text.index("\nimport ") + 1 :]


__getattr__ = deprecated_exports(
    __name__,
    {
        "ironflow.sessions.client": ("AsyncSandbox",),
        "ironflow.sessions.remote": ("RemoteSessions",),
        "ironflow.sessions.sync": ("Sandbox",),
    },
    instead="ironflow.sessions",
)
