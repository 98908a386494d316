"""The pure parts of a command's terminal and controls: signal names, terminal sizes (the runtime's
``terminal.py``, loaded by path as the sandbox loads it), and the client's command spec."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest
from tests.sessions.unit.runtime_files import runtime_module

from ironflow.sessions import commands


@pytest.fixture(scope="module")
def terminal() -> Iterator[types.ModuleType]:
    with runtime_module("terminal") as loaded:
        yield loaded


@pytest.mark.parametrize(("name", "number"), [("TERM", 15), ("SIGINT", 2), ("kill", 9), ("Hup", 1), ("WINCH", 28)])
def test_a_signal_is_named_with_or_without_its_prefix(terminal: types.ModuleType, name: str, number: int) -> None:
    assert terminal.signal_number(name) == number


@pytest.mark.parametrize("name", ["", "NOPE", "SIGSYS", "9", "TERM\nX", "SEGV", None])
def test_any_other_signal_name_is_a_400_in_one_line(terminal: types.ModuleType, name: object) -> None:
    with pytest.raises(Exception, match="unknown signal") as refused:
        terminal.signal_number(name)
    assert refused.value.status == 400  # type: ignore[attr-defined]
    assert "\n" not in refused.value.message  # type: ignore[attr-defined]


def test_a_terminal_is_80x24_unless_sized_within_bounds(terminal: types.ModuleType) -> None:
    assert terminal.terminal_size({}) == (80, 24)
    assert terminal.terminal_size({"cols": 132, "rows": 43}) == (132, 43)
    for bad in ({"cols": 0}, {"cols": -1}, {"rows": 10001}, {"cols": "80"}, {"cols": 1.5}, {"rows": 2**40}):
        with pytest.raises(Exception, match="cols and rows") as refused:
            terminal.terminal_size(bad)
        assert refused.value.status == 400  # type: ignore[attr-defined]


def test_the_spec_asks_for_a_terminal_or_kept_stdin_only_when_told() -> None:
    plain = commands._spec(["sh"], None, None, None, None, True)
    assert not {"pty", "cols", "rows", "keep_stdin"} & set(plain)
    spec = commands._spec("python3 -q", {"A": "1"}, "w", 5.0, "x", True, pty=True, size=(100, 30), keep_stdin=True)
    assert spec == {
        "argv": ["python3", "-q"],
        "env": {"A": "1"},
        "cwd": "w",
        "timeout_seconds": 5.0,
        "stdin": "eA==",
        "background": True,
        "pty": True,
        "cols": 100,
        "rows": 30,
        "keep_stdin": True,
    }
