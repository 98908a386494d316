"""``ironflow sandbox open --workspace`` and ``ironflow sandbox diff`` through a real ``sandbox serve``:
the session works on a private copy, ``diff`` prints the patch, ``--apply`` writes it into the
directory, and what cannot work is one ``error:`` line, exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.sessions.integration.serving import Served, ironflow

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return repo


def _error(done: subprocess.CompletedProcess[str], text: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ")
    assert text in done.stderr
    assert done.stderr.count("\n") == 1


def test_open_on_a_workspace_then_diff_and_apply(served: Served, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    opened = ironflow("sandbox", "open", "--workspace", str(repo), env=served.env)
    assert opened.returncode == 0, opened.stderr
    sandbox_id = opened.stdout.strip()
    edit = ironflow(
        "sandbox", "exec", sandbox_id, "--", "sh", "-c", "pwd && sed -i 's/a - b/a + b/' calc.py && echo x > new.txt",
        env=served.env,
    )  # fmt: skip
    assert (edit.returncode, edit.stdout) == (0, "/workspace\n"), edit.stderr

    shown = ironflow("sandbox", "diff", sandbox_id, env=served.env)
    assert shown.returncode == 0, shown.stderr
    assert "-    return a - b\n+    return a + b\n" in shown.stdout
    assert "+x\n" in shown.stdout
    assert shown.stderr.splitlines() == ["modified calc.py", "added new.txt"]
    as_yaml = yaml.safe_load(ironflow("sandbox", "diff", sandbox_id, "-o", "yaml", env=served.env).stdout)
    as_json = json.loads(ironflow("sandbox", "diff", sandbox_id, "-o", "json", env=served.env).stdout)
    assert as_yaml == as_json
    assert as_json["patch"] == shown.stdout
    assert (repo / "calc.py").read_text().endswith("a - b\n")  # untouched until --apply

    out = tmp_path / "change.patch"
    applied = ironflow("sandbox", "diff", sandbox_id, "--apply", "--patch", str(out), env=served.env)
    assert (applied.returncode, applied.stdout) == (0, ""), applied.stderr
    assert out.read_text() == shown.stdout
    assert (repo / "calc.py").read_text().endswith("a + b\n")
    assert (repo / "new.txt").read_text() == "x\n"
    assert ironflow("sandbox", "close", sandbox_id, env=served.env).returncode == 0


def test_what_cannot_work_is_one_line(served: Served, tmp_path: Path) -> None:
    _error(ironflow("sandbox", "open", "--workspace", str(tmp_path / "nope"), env=served.env), "is not a directory")
    plain = ironflow("sandbox", "open", env=served.env).stdout.strip()
    _error(ironflow("sandbox", "diff", plain, env=served.env), "was opened without a workspace")
    _error(ironflow("sandbox", "diff", "sbx-0000000000000000", env=served.env), "no open sandbox session")
    _error(ironflow("sandbox", "diff", "nope", env=served.env), "invalid sandbox id 'nope'")
