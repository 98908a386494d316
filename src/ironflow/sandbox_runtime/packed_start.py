"""The runtime's start from its packed code: ``python3 -I -S -c <this file's text> PACKED ARGS``.

Under gVisor every file a sandbox opens costs it a trip to the gofer, and every bind a mount at
boot: a directory of code bound in and imported file by file was 21-47 ms of a session's open.
The host packs the runtime's modules, compiled, into one file beside the session's socket
(:func:`ironflow.sandbox_runtime.packed`); this reads it once, as gVisor's root, before the
runtime drops, and the modules import from memory from then on (the lazy ones, ``terminal`` and
``watch``, included). Nothing of the code is then in reach of the commands: the socket's
directory is 0700, gVisor's root's. A module's ``__file__`` names that directory, so the
``sys.path`` entry each adds is one only gVisor's root can write.

Run with ``-c`` (the text is on the argv, compiled at each start: it is small), standard
library only, nothing of ironflow; imported, it does nothing.
"""

import marshal
import os
import sys

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    import types
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec

__all__ = ["Packed", "read_packed"]


class Packed:
    """A meta path finder and loader of the packed modules: their marshalled code by name, each
    read at its import (``watch`` and ``terminal`` at a session's first need of them, if ever)."""

    def __init__(self, codes: "dict[str, bytes]", folder: str) -> None:
        self._codes = codes
        self._folder = folder

    def find_spec(self, name: str, path: "Sequence[str] | None" = None, target: object = None) -> "ModuleSpec | None":
        if name not in self._codes:
            return None
        origin = os.path.join(self._folder, name + ".py")
        spec: ModuleSpec = sys.modules["_frozen_importlib"].ModuleSpec(name, self, origin=origin)
        spec.has_location = True  # __file__: each module adds its directory to sys.path
        return spec

    def create_module(self, spec: "ModuleSpec") -> None:
        return None

    def exec_module(self, module: "types.ModuleType") -> None:
        code = marshal.loads(self._codes[module.__name__])  # noqa: S302  # the host's own code, packed
        exec(code, module.__dict__)  # noqa: S102


def read_packed(path: str) -> "dict[str, bytes]":
    """The marshalled code objects packed in ``path`` by name: ValueError if they were packed by
    another Python."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    tag, _, data = b"".join(chunks).partition(b"\n")
    if tag != sys.implementation.cache_tag.encode():
        raise ValueError(f"the runtime's code was packed for {tag.decode(errors='replace')!r}, not this Python")
    codes: dict[str, bytes] = marshal.loads(data)  # noqa: S302  # written by the host, in a 0700 directory
    return codes


if __name__ == "__main__":
    try:
        _codes = read_packed(sys.argv[1])
    except (OSError, ValueError, EOFError, IndexError) as _exc:
        sys.stderr.write(f"ironflow-runtime: cannot read the runtime's code: {_exc}\n")
        sys.exit(2)
    sys.meta_path.insert(0, Packed(_codes, os.path.dirname(sys.argv[1])))
    # Held across the start's imports, the import lock is taken again by level, not by a lock call:
    # on this Python each such call reads the clock, a trap into gVisor's kernel (half its reads here).
    import _imp

    _imp.acquire_lock()
    try:
        import server  # type: ignore[import-not-found]
    finally:
        _imp.release_lock()
    sys.exit(server.main(sys.argv[2:]))
