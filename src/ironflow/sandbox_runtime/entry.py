"""The runtime's entry by path (``python3 -I -S entry.py ARGS``): it imports ``server.py`` and runs it.

A file run by path is compiled at every start, never cached; an imported one is read from its
``__pycache__``. Compiling ``server.py`` was 3–7 ms of every local session's open (the host
compiles the directory once: :func:`ironflow.sandbox_runtime.compiled`). Standard library only,
nothing of ironflow, like its siblings; imported, it does nothing.
"""

import os
import sys

__all__: list[str] = []

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the siblings, when run by path
    import server  # type: ignore[import-not-found]

    sys.exit(server.main(sys.argv[1:]))
