"""Every module of the package states its job and its public names, and a name says one job
(STYLE.md: Modules, Public surface, Names).

A module docstring comes first and every module declares ``__all__``; each name listed
there exists, so a facade never re-exports something that was renamed away. A module's
basename names one job (a few may repeat where the job is the same: a server's ``app.py``),
and a backend's package root holds its face and its core, every other job a sub-package.
:data:`MAX_MODULE_LINES` is a ceiling, not the reason to cut: a module is cut where its jobs
part (functions' complexity is ruff's C901, in scripts/check).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import ironflow

PACKAGE = Path(ironflow.__file__).parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _declares_all(tree: ast.Module) -> bool:
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return True
    return False


@pytest.mark.parametrize("path", MODULES, ids=_dotted)
def test_module_has_a_docstring_and_declares_all(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree), f"{_dotted(path)}: start with a docstring saying what the module does"
    assert _declares_all(tree), f"{_dotted(path)}: declare __all__"


@pytest.mark.parametrize("path", [p for p in MODULES if p.name != "__main__.py"], ids=_dotted)
def test_every_name_in_all_exists(path: Path) -> None:
    module = importlib.import_module(_dotted(path))
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == [], f"{module.__name__}.__all__ lists names it does not define"


#: A second job shows as length first: split a module past this many lines by job.
MAX_MODULE_LINES = 500


@pytest.mark.parametrize("path", MODULES, ids=_dotted)
def test_module_is_at_most_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_dotted(path)} has {lines} lines: split it by job"


#: Basenames that may name a module in two places, each for the same job (a server's ``app.py``,
#: a store's ``postgres.py``); one more means a name that says two things.
MAX_REPEATED_BASENAMES = 12
#: A backend's package root holds its face and its core; every other job is a sub-package.
MAX_ROOT_MODULES = {"k8s": 14, "local": 10}


def test_a_module_basename_names_one_job() -> None:
    counts = Counter(p.name for p in MODULES if p.name != "__init__.py")
    repeated = sorted(name for name, n in counts.items() if n > 1)
    assert len(repeated) <= MAX_REPEATED_BASENAMES, f"{len(repeated)} basenames repeat: {repeated}"


@pytest.mark.parametrize(("package", "limit"), sorted(MAX_ROOT_MODULES.items()))
def test_a_backend_root_holds_its_face_and_core(package: str, limit: int) -> None:
    root = sorted(p.name for p in (PACKAGE / package).glob("*.py"))
    assert len(root) <= limit, f"ironflow.{package} has {len(root)} modules at its root: {root}"


#: Modules a user may import first, each alone in a fresh interpreter.
FIRST_IMPORTS = [
    "ironflow.steps",
    "ironflow.claude",
    "ironflow.claude.output",
    "ironflow.labels",
    "ironflow.provider",
]


@pytest.mark.parametrize("name", FIRST_IMPORTS)
def test_module_imports_first_in_a_fresh_interpreter(name: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
