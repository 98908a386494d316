"""A local session's runtime starts from ``entry.py``, which imports ``server.py``: its bytecode is read
from ``__pycache__`` (written by the host), where a file run by path was compiled at every open.
Under gVisor it starts from its code packed in one file (``packed_start.py``): no module file read."""

from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
import sys
from pathlib import Path

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


def test_local_backends_run_the_entry_or_the_packed_start() -> None:
    assert starter.RUNTIME_PATH.endswith("/" + sandbox_runtime.ENTRY)
    command = gvisor_runtime.runtime_command("python3")
    assert command[3:6] == ("-c", sandbox_runtime.packed_start_source(), gvisor_runtime.PACKED_PATH)


def _packed_start(
    tmp_path: Path, *args: str, packed: bytes | None = None, verbose: bool = False
) -> subprocess.CompletedProcess[bytes]:
    path = tmp_path / "runtime.packed"
    path.write_bytes(sandbox_runtime.packed() if packed is None else packed)
    start = sandbox_runtime.packed_start_source()
    argv = [sys.executable, "-I", "-S", *(["-v"] if verbose else []), "-c", start, str(path), *args]
    return subprocess.run(argv, capture_output=True, timeout=30, check=False, cwd=tmp_path)


def test_the_packed_start_answers_as_the_server_and_reads_no_module_file(tmp_path: Path) -> None:
    """Every module the runtime runs at its start comes from the one packed file: none of its own
    directory, nor ``__future__``, is read (only the interpreter's own start reads ``encodings``)."""
    done = _packed_start(tmp_path, "--unix", "s", "--bogus", verbose=True)
    assert done.returncode == 2, done.stderr[-2000:]
    assert b"server.py: error: unrecognized arguments: --bogus" in done.stderr
    read = [line for line in done.stderr.splitlines() if line.startswith(b"# code object from ")]
    assert read, "python -v says which module files it reads"
    assert [line for line in read if b"/encodings/" not in line] == []


def test_a_lazy_sibling_imports_from_the_packed_code_with_its_file_in_the_packed_files_directory(
    tmp_path: Path,
) -> None:
    """``terminal`` is imported at a session's first pty, after the runtime dropped: from memory,
    named after the directory of the packed file (gVisor's root's), never a path a command could fill."""
    packed = tmp_path / "rt.packed"
    packed.write_bytes(sandbox_runtime.packed())
    probe = (
        "import sys\n"
        "from ironflow.sandbox_runtime.packed_start import Packed, read_packed\n"
        f"sys.meta_path.insert(0, Packed(read_packed({str(packed)!r}), '/nowhere'))\n"
        "import terminal\n"
        "print(terminal.__file__, type(terminal.__loader__).__name__, 'watch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout.split() == ["/nowhere/terminal.py", "Packed", "False"]


def test_code_packed_by_another_python_is_refused_with_one_line(tmp_path: Path) -> None:
    done = _packed_start(tmp_path, "--unix", "s", packed=b"cpython-399\n\x00")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        b"ironflow-runtime: cannot read the runtime's code: "
        b"the runtime's code was packed for 'cpython-399', not this Python"
    ]
    missing = subprocess.run(
        [sys.executable, "-I", "-S", "-c", sandbox_runtime.packed_start_source(), str(tmp_path / "none")],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert missing.returncode == 2
    assert missing.stderr.startswith(b"ironflow-runtime: cannot read the runtime's code: [Errno 2]")
    assert missing.stderr.count(b"\n") == 1


def test_the_packed_code_holds_every_runtime_module_and_the_standard_ones_read_at_start() -> None:
    tag, _, data = sandbox_runtime.packed().partition(b"\n")
    assert tag == sys.implementation.cache_tag.encode()
    folder = os.path.dirname(sandbox_runtime.SERVER_PATH)
    modules = {name[:-3] for name in os.listdir(folder) if name.endswith(".py")}
    modules -= {"__init__", "entry", "packed_start"}
    assert set(marshal.loads(data)) == modules | {"__future__"}  # noqa: S302  # our own bytes
