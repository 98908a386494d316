"""The common call read without Typer (:mod:`ironflow.cli.quick`) is the call Typer makes.

Each form is held to its Typer command twice: its options are the command's (the same spellings,
the same parameters, the same kinds), and for every argument list of a corpus the function is
called with the same values both ways, or the quick reader declines and Typer reads it.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ironflow.cli import one_shot, quick, run_listing, session_exec
from ironflow.cli.app import load_command
from ironflow.cli.root import app

SID = "sbx-0123456789abcdef"

#: The options a form leaves to Typer on purpose: a session's terminal and a cluster's sessions.
LEFT_TO_TYPER: dict[tuple[str, ...], set[str]] = {("sandbox", "exec"): {"--backend", "--provider", "--tty", "-t"}}

#: Argument lists (after ``ironflow``) of each form's command, read both ways.
CORPUS = [
    ["exec", "--", "true"],
    ["exec", "true"],
    ["exec", "ls", "-l", "--timeout", "3"],
    ["exec", "--timeout", "2.5", "--isolation", "gvisor", "-o", "json", "--", "sh", "-c", "echo hi"],
    ["exec", "--output=yaml", "--no-stdin", "--allow-host", "pypi.org", "--allow-host", "a.b:8443", "true"],
    ["exec", "--egress-profile", "npm", "--egress", "policy.yaml", "--mount", "/tmp:/data:ro", "--", "cat"],
    ["exec", "--backend", "k8s", "--provider", "p.yaml", "--stdin", "--", "true"],
    ["exec", "--workspace", "repo", "--patch", "out.patch", "--apply", "--push", "b1", "--", "git", "status"],
    ["exec", "--", "--", "x"],
    ["exec", "true", "--", "x"],
    ["-v", "exec", "--", "true"],
    ["-vv", "--quiet", "exec", "--", "true"],
    ["-q", "exec", "--", "true"],
    ["--verbose", "-v", "exec", "--", "true"],
    ["exec", "--timeout", "0", "--", "true"],
    ["exec", "--timeout", "nope", "--", "true"],
    ["exec", "--isolation", "BWRAP", "--", "true"],
    ["exec", "--patch", "-", "--", "true"],
    ["exec", "-ojson", "--", "true"],
    ["exec", "--apply=yes", "--", "true"],
    ["exec", "-h"],
    ["exec", "--timeout"],
    ["exec"],
    ["runs", "list"],
    ["runs", "list", "--store", "sqlite:///x.db", "--status", "failed", "--limit", "3", "-o", "json"],
    ["runs", "list", "--limit=7", "--output", "yaml"],
    ["runs", "list", "--limit", "0"],
    ["runs", "list", "--status", "nope"],
    ["runs", "list", "extra"],
    ["runs", "list", "--help"],
    ["sandbox", "exec", SID, "--", "true"],
    ["sandbox", "exec", "--server", "http://127.0.0.1:9", SID, "--timeout", "4", "--", "sh", "-c", "x"],
    ["sandbox", "exec", SID, "--cwd", "sub", "--env", "A=1", "--env", "B=2", "--server=http://h:1", "--", "env"],
    ["sandbox", "exec", SID, "--", "ls", "--timeout", "5"],
    ["sandbox", "exec", "not-an-id", "--", "true"],
    ["sandbox", "exec", SID, "ls"],
    ["sandbox", "exec", SID, "-t", "--", "true"],
    ["sandbox", "exec", SID, "--backend", "local", "--", "true"],
    ["sandbox", "exec", SID],
    ["sandbox", "exec", "--", "true"],
]


class Called(Exception):
    """Raised by a recording stand-in of a form's function: what it was called with."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__("called")
        self.args_, self.kwargs = args, kwargs


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each form's function records its call instead of running."""

    def recorder(*args: Any, **kwargs: Any) -> None:
        raise Called(args, kwargs)

    for module in (one_shot, run_listing, session_exec):
        monkeypatch.setattr(module, "run", recorder)
    for name in list(os.environ):
        if name.startswith("IRONFLOW_"):
            monkeypatch.delenv(name)


def _typers_call(argv: list[str]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    result = CliRunner().invoke(app, argv)
    if isinstance(result.exception, Called):
        return result.exception.args_, result.exception.kwargs
    return None


def _quick_call(argv: list[str]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    parsed = quick.parse(argv)
    if parsed is None:
        return None
    call, rest = parsed
    module, _, name = call.form.target.partition(":")
    assert name == "run"
    defaults = {
        p.name: p.default
        for p in inspect.signature(_REAL[module]).parameters.values()
        if p.default is not inspect.Parameter.empty
    }
    args = (*call.positionals, rest) if call.form.args else tuple(call.positionals)
    return args, {**defaults, **call.params}


_REAL = {m.__name__: m.run for m in (one_shot, run_listing, session_exec)}


@pytest.mark.parametrize("argv", CORPUS, ids=[" ".join(a) for a in CORPUS])
def test_the_quick_call_is_typers_or_declined(argv: list[str], recording: None) -> None:
    quick_call = _quick_call(argv)
    if quick_call is None:
        return  # Typer reads it, as it always did
    assert _typers_call(argv) == quick_call


def test_the_corpus_has_quick_calls_and_declines() -> None:
    """Both branches are exercised: most common calls are read quick, and the odd ones are not."""
    read = [argv for argv in CORPUS if quick.parse(argv) is not None]
    assert len(read) >= 15
    declined = [
        ["exec", "-h"],
        ["exec", "--patch", "-", "--", "true"],
        ["runs", "list", "--limit", "0"],
        ["sandbox", "exec", SID, "-t", "--", "true"],
        ["-vv", "--quiet", "exec", "--", "true"],
    ]
    for argv in declined:
        assert quick.parse(argv) is None, argv


def _kind(param: Any) -> set[str]:
    if param.multiple:
        return {"many"}
    if param.is_flag:
        return {"flag", "off"}
    return {"value"}


@pytest.mark.parametrize("words", list(quick.FORMS), ids=" ".join)
def test_a_forms_options_are_its_typer_commands(words: tuple[str, ...]) -> None:
    command = load_command(words[0])
    for word in words[1:]:
        command = command.get_command(None, word)
    form = quick.FORMS[words]
    declared: dict[str, Any] = {}
    for param in command.params:
        for spelling in (*param.opts, *getattr(param, "secondary_opts", ())):
            if spelling.startswith("-"):
                declared[spelling] = param
    for spelling, option in form.options.items():
        assert spelling in declared, f"{spelling} is not an option of ironflow {' '.join(words)}"
        param = declared[spelling]
        assert option.param == param.name, spelling
        assert option.kind in _kind(param), spelling
        if option.kind == "off":
            assert spelling in param.secondary_opts, spelling
    left = LEFT_TO_TYPER.get(words, set())
    assert set(declared) - {"--help", "-h"} == set(form.options) | left
    positionals = [p.name for p in command.params if not p.opts[0].startswith("-")]
    assert positionals == list(form.positionals)


def test_a_forms_defaults_are_the_typer_commands() -> None:
    """What the quick reader leaves out, the function's default stands for: Typer's default."""
    for words, form in quick.FORMS.items():
        command = load_command(words[0])
        for word in words[1:]:
            command = command.get_command(None, word)
        function = _REAL[form.target.partition(":")[0]]  # the real one: no stand-in here
        defaults = {p.name: p.default for p in inspect.signature(function).parameters.values()}
        for param in command.params:
            if param.name in defaults and param.name not in ("sandbox_id",):
                typer_default = param.default if not callable(param.default) else param.default()
                mine = defaults[param.name]
                assert (typer_default or None) == (mine or None) or typer_default == mine, (words, param.name)


def test_a_declined_call_still_runs_through_typer(tmp_path: Path) -> None:
    """``runs list --limit 0``: Typer's own one-line error, exit 2."""
    result = CliRunner().invoke(app, ["runs", "list", "--limit", "0", "--store", f"sqlite:///{tmp_path}/x.db"])
    assert result.exit_code == 2
    assert "--limit" in result.output
