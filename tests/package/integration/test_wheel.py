"""The built wheel is the product: built from this checkout, installed with its dependencies into
a fresh virtual environment (no access to this checkout or its editable install), it runs the
README's offline agent step, and its metadata says what an index page shows."""

from __future__ import annotations

import email.parser
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import local_sandbox

from ironflow import __version__ as ironflow_version

ROOT = Path(__file__).resolve().parents[3]


def _run(argv: list[str], *, cwd: Path, timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _clean_env(home: str) -> dict[str, str]:
    """This machine's environment without anything that points back at the checkout."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = home  # the pinned Claude Code CLI is found in the user's cache, as after scripts/install
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    env = _clean_env(os.environ.get("HOME", str(out)))
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)]
    _run(build, cwd=out, timeout=300, env=env)
    (built,) = out.glob("ironflow_sandbox-*.whl")
    return built


def test_the_wheels_metadata_is_what_an_index_page_shows(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    assert metadata["Name"] == "ironflow-sandbox"
    assert metadata["Version"] == ironflow_version
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "PEP 639: the expression, not a classifier"
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert str(metadata.get_payload()).startswith("# ironflow")
    # What the code reads at run time ships in it: types, migrations, CRD schemas with their licence.
    assert "ironflow/py.typed" in names
    assert any(n.startswith("ironflow/engine/migrations/") and n.endswith(".sql") for n in names)
    assert "ironflow/agent_sandbox/crds/LICENSE" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/")) or "__pycache__" in n]


@local_sandbox
@pytest.mark.timeout(900)
def test_the_wheel_in_a_fresh_venv_runs_the_offline_agent_step(wheel: Path, tmp_path: Path) -> None:
    env = _clean_env(os.environ["HOME"])
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, timeout=120, env=env)
    python, ironflow = venv / "bin" / "python", venv / "bin" / "ironflow"
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path, timeout=600, env=env)
    where = _run([str(python), "-c", "import ironflow; print(ironflow.__file__)"], cwd=tmp_path, timeout=60, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    done = _run([str(ironflow), "agent", "--fake-model", "Say hello"], cwd=tmp_path, timeout=120, env=env)
    assert done.stdout.strip() == "Hello from the sandbox! (offline fake model)"
    version = _run([str(ironflow), "--version"], cwd=tmp_path, timeout=60, env=env)
    assert version.stdout == f"ironflow {ironflow_version}\n"
