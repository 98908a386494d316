"""``runtime_module``: a file of the session runtime loaded by path, as the sandbox loads it (its
siblings by name), and unloaded after the module's tests."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path

from ironflow.sandbox_runtime import SERVER_PATH


@contextlib.contextmanager
def runtime_module(name: str) -> Iterator[types.ModuleType]:
    folder = str(Path(SERVER_PATH).parent)
    sys.path.insert(0, folder)
    try:
        yield __import__(name)
    finally:
        sys.path.remove(folder)
        for loaded in (name, "streams", "lite", "popen"):
            sys.modules.pop(loaded, None)
