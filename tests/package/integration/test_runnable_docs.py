"""The README's and docs' Python snippets run as written (issue 17: the README's snippet, saved
as a script, failed with ``SyntaxError: 'await' outside function``).

A block fenced `` ```python runnable `` is saved as a script and run in a fresh interpreter,
offline (the offline model server, the local bubblewrap sandbox); it must exit 0. Every other
Python block of the README must compile as a script, so none needs an event loop it lacks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import local_sandbox

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A fenced block: its info string (``python runnable``) and its text.
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
MARKER = "python runnable"


def blocks(path: Path) -> list[tuple[str, int, str]]:
    """(info string, line number, text) of each fenced block of ``path``."""
    text = path.read_text()
    return [(m["info"].strip(), text.count("\n", 0, m.start()) + 1, m["body"]) for m in FENCE.finditer(text)]


RUNNABLE = [
    pytest.param(body, id=f"{path.relative_to(ROOT)}:{line}")
    for path in DOCS
    for info, line, body in blocks(path)
    if info == MARKER
]


def test_the_readme_has_a_runnable_block() -> None:
    assert [info for info, _, _ in blocks(ROOT / "README.md") if info == MARKER], "the README's script is marked"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        pytest.param(body, f"README.md:{line}", id=f"README.md:{line}")
        for info, line, body in blocks(ROOT / "README.md")
        if info.split()[:1] == ["python"]
    ],
)
def test_every_readme_python_block_compiles_as_a_script(body: str, where: str) -> None:
    try:
        compile(body, where, "exec")
    except SyntaxError as exc:
        pytest.fail(f"{where}: {exc.msg} (line {exc.lineno} of the block): a saved script would fail")


@local_sandbox
@pytest.mark.timeout(300)
@pytest.mark.parametrize("body", RUNNABLE)
def test_a_runnable_block_runs_as_written_offline(body: str, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(body)
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), "a runnable block shows what it did"


#: Where the README says how to run its script: ``save it as `hello.py`, run `COMMAND```.
RUN_AS = re.compile(r"save it as `hello\.py`[^`]*, run `(?P<command>[^`]+)`")


@local_sandbox
@pytest.mark.timeout(300)
@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="the tests run outside a virtual environment")
def test_the_readme_script_runs_the_way_the_readme_says_from_a_fresh_shell(tmp_path: Path) -> None:
    """Issue 31: ``python hello.py`` in a shell whose venv is not active failed with
    ``ModuleNotFoundError``. Here the checkout's ``.venv`` is the one the tests run in, and the
    shell has neither it on PATH nor ``VIRTUAL_ENV`` nor ``PYTHONPATH``."""
    readme = (ROOT / "README.md").read_text()
    said = RUN_AS.search(readme)
    assert said is not None, "the README says how to run hello.py"
    [(_, _, body)] = [b for b in blocks(ROOT / "README.md") if b[0] == MARKER]
    (tmp_path / "hello.py").write_text(body)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    venv_bin = os.path.realpath(os.path.join(sys.prefix, "bin"))
    path = ":".join(d for d in os.environ.get("PATH", "").split(":") if d and os.path.realpath(d) != venv_bin)
    drop = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, "PATH": path}
    done = subprocess.run(
        ["bash", "-c", said["command"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, f"`{said['command']}`: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert done.stdout.strip()
