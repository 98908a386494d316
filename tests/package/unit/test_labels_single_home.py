"""Label and annotation keys of ironflow and of agent-sandbox are spelled only in ``labels.py``.

STYLE.md: label keys, selectors and component values live in one module everyone imports,
so a renamed key cannot leave a second spelling behind. Docstrings and messages may name a
key; a string that *is* a key, anywhere else in the package, fails this test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ironflow

PACKAGE = Path(ironflow.__file__).parent
HOME = PACKAGE / "labels.py"
KEY = re.compile(r"(ironflow\.io|app\.kubernetes\.io|agents\.x-k8s\.io)/[a-z0-9-]+")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def key_literals(source: str) -> list[tuple[int, str]]:
    """Every string constant of ``source`` that is exactly a label key (docstrings aside)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and KEY.fullmatch(node.value)
    ]


def test_the_scanner_finds_a_key_and_ignores_docstrings_and_messages() -> None:
    source = '"""ironflow.io/run-id"""\nA = "ironflow.io/run-id"\nB = f"label {A} is ironflow.io/step"\n'
    assert key_literals(source) == [(2, "ironflow.io/run-id")]


def test_no_module_but_labels_spells_a_label_key() -> None:
    found = {
        f"{path.relative_to(PACKAGE)}:{line}: {value}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HOME
        for line, value in key_literals(path.read_text())
    }
    assert found == set(), "import these keys from ironflow.labels instead"
    assert key_literals(HOME.read_text()), "the scan must see the keys where they do live"
