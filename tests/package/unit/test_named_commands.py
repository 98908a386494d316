"""What the docs, READMEs and image recipes tell a reader to run or read exists: each
``python -m ironflow.X`` is a module with a ``__main__`` entry, each ``tests/….py`` a file
(issue 33: the runner's Dockerfile named ``ironflow.dockerfile``, a module that never was)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ironflow

PACKAGE = Path(ironflow.__file__).parent
ROOT = Path(__file__).resolve().parents[3]
TEXTS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "docker").glob("*/Dockerfile"),
        *(ROOT / "docker").glob("*/README.md"),
    ]
)
_MODULE = re.compile(r"python -m (ironflow(?:\.\w+)*)")
_TEST_PATH = re.compile(r"\btests/[\w/]+\.py\b")


def _runnable(module: str) -> bool:
    """``python -m module`` runs something: a package's ``__main__.py`` or a module's ``__main__`` block."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    if (path / "__main__.py").is_file():
        return True
    source = path.with_suffix(".py")
    return source.is_file() and 'if __name__ == "__main__":' in source.read_text(encoding="utf-8")


@pytest.mark.parametrize("text", TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_module_and_test_file_exists(text: Path) -> None:
    content = text.read_text(encoding="utf-8")
    missing = [m for m in _MODULE.findall(content) if not _runnable(m)]
    missing += [t for t in _TEST_PATH.findall(content) if not (ROOT / t).is_file()]
    assert missing == [], f"{text.relative_to(ROOT)} names what does not exist: {missing}"


def test_the_scan_sees_the_runner_recipe_and_its_checker() -> None:
    recipe = (ROOT / "docker" / "claude-runner" / "Dockerfile").read_text(encoding="utf-8")
    assert _MODULE.findall(recipe) == ["ironflow.cluster.dockerfile"]
    assert not _runnable("ironflow.dockerfile")
