"""The old import paths of moved modules: each warns once and hands out the new module's very names."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from ironflow import _renamed


@pytest.mark.parametrize(("old", "new"), sorted(_renamed.MOVED.items()))
def test_an_old_path_warns_and_gives_the_new_modules_names(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        shim = importlib.import_module(old)
    target = importlib.import_module(new)
    names = list(getattr(target, "__all__", ()))
    assert names, f"{new} declares what it exports"
    assert shim.__all__ == names
    for name in names:
        assert getattr(shim, name) is getattr(target, name)
    with pytest.raises(AttributeError):
        _ = shim.no_such_name_here


def test_an_old_path_has_no_file_left_behind() -> None:
    for old in _renamed.MOVED:
        spec = importlib.util.find_spec(old)
        assert spec is not None
        assert spec.origin is None, f"{old} is a real module again: drop it from MOVED"


def test_a_script_importing_the_old_path_runs_and_is_told_where_it_went() -> None:
    code = "from ironflow.local.provider import LocalSandboxProvider; print(LocalSandboxProvider.__module__)"
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "ironflow.local.sandbox_provider"
    assert "ironflow.local.provider moved to ironflow.local.sandbox_provider" in done.stderr


def test_an_unknown_module_is_still_not_found() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("ironflow.local.no_such_module")


def test_every_moved_module_is_in_the_docs_table() -> None:
    doc = (Path(__file__).parents[3] / "docs" / "architecture.md").read_text()
    missing = [old for old, new in _renamed.MOVED.items() if f"| `{old}` | `{new}` |" not in doc]
    assert missing == [], f"docs/architecture.md does not list: {missing}"
