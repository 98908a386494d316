"""Every command's ``--help`` and each error line of issue 17's table match their golden files
(tests/cli/golden/), rendered at 80 columns without colour in a clean environment.

A changed output fails with its diff; regenerate with ``python -m tests.cli.golden_update`` and
review. The commands are found by walking the app, so a new command (or subcommand) only needs
that regenerate: until then its test fails naming the missing file.
"""

from __future__ import annotations

import difflib

import pytest
from tests.cli import golden_update as golden

NAMES = golden.expected_files()


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return golden.rendered()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", NAMES)
def test_the_output_is_the_golden_one(rendered: dict[str, str], name: str) -> None:
    path = golden.GOLDEN / name
    if not path.is_file():
        pytest.fail(f"no golden file tests/cli/golden/{name}: run `{golden.UPDATE_COMMAND}`, review it, commit it")
    want, got = path.read_text(), rendered[name]
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "now"))
        pytest.fail(f"tests/cli/golden/{name} differs (if intended: `{golden.UPDATE_COMMAND}`):\n{diff}")


def test_no_golden_file_is_left_from_a_command_that_is_gone() -> None:
    stale = sorted({p.relative_to(golden.GOLDEN).as_posix() for p in golden.GOLDEN.rglob("*.txt")} - set(NAMES))
    assert not stale, f"golden files of no command or case: {stale}; `{golden.UPDATE_COMMAND}` removes them"


def test_every_error_case_is_one_error_line_and_a_documented_code(rendered: dict[str, str]) -> None:
    for case in golden.ERROR_CASES:
        shown = rendered[golden.error_file(case)]
        code = int(shown.splitlines()[1].removeprefix("exit "))
        stderr = shown.split("--- stderr\n", 1)[1].split("--- stdout\n", 1)[0]
        assert code in (2, 3), (case.name, shown)
        assert stderr.startswith("error: "), (case.name, shown)
        assert stderr.count("\n") == 1, (case.name, shown)
        assert "Traceback" not in shown
