"""A local session's runtime starts from ``entry.py``, which imports ``server.py``: its bytecode is read
from ``__pycache__`` (written by the host), where a file run by path was compiled at every open."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from ironflow import sandbox_runtime
from ironflow.local.sessions import gvisor_runtime, starter


def test_compiled_writes_the_bytecode_of_every_runtime_file() -> None:
    sandbox_runtime.compiled()
    folder = os.path.dirname(sandbox_runtime.SERVER_PATH)
    names = ("server.py", "streams.py", "lite.py", "popen.py", "startup.py", "confine.py", "terminal.py", "watch.py")
    for name in names:
        cached = importlib.util.cache_from_source(os.path.join(folder, name))
        assert os.path.getmtime(cached) >= os.path.getmtime(os.path.join(folder, name)), name


def test_the_entry_reads_the_servers_bytecode_and_answers_as_the_server() -> None:
    sandbox_runtime.compiled()
    entry = os.path.join(os.path.dirname(sandbox_runtime.SERVER_PATH), sandbox_runtime.ENTRY)
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-v", entry, "--unix", "s", "--bogus"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert b"server.py: error: unrecognized arguments: --bogus" in done.stderr
    server_pyc = importlib.util.cache_from_source(sandbox_runtime.SERVER_PATH).encode()
    assert b"# code object from '" + server_pyc + b"'" in done.stderr  # read, not compiled


def test_local_backends_run_the_entry() -> None:
    assert starter.RUNTIME_PATH.endswith("/" + sandbox_runtime.ENTRY)
    assert gvisor_runtime.RUNTIME_PATH.endswith("/" + sandbox_runtime.ENTRY)
