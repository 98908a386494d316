"""The common call of the commands typed most, read without Typer.

Typer and its click take about 40 ms to import, three times a Python start, and ``ironflow exec
-- true`` should cost little more than its sandbox. So :func:`ironflow.cli.app.main` hands the
arguments here first. A call made only of the root options and the options in a command's
:data:`FORMS` entry is read here and run by the function the Typer command calls, with the same
values (the function's defaults stand for what is not given). Anything else (``-h``, an option not
in the form, a value its type refuses, ``--opt`` with no value, ``-ojson``, a value that starts
with ``-``) is declined before anything runs, and Typer reads the whole call: help, completion and
every usage error stay Typer's. tests/cli/unit/test_cli_quick.py holds each form to its Typer
command: the same options, and the same call for the same arguments.
"""

from __future__ import annotations

import gc
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["FORMS", "Form", "Option", "parse", "run"]

#: A value's type: its text to the value, ValueError when the type refuses it (Typer then says why).
Convert = Callable[[str], Any]


class Option:
    """One spelling of an option: the parameter it sets, and how.

    ``kind``: ``value`` (one value), ``many`` (repeatable, a list), ``flag`` (True) or ``off`` (False).
    A plain class: a NamedTuple's class costs a millisecond to make, at every ``ironflow`` start.
    """

    __slots__ = ("convert", "kind", "param")

    def __init__(self, param: str, kind: str = "value", convert: Convert = str) -> None:
        self.param, self.kind, self.convert = param, kind, convert


class Form:
    """What a command's common call may hold, and the function that runs it (``module:function``).

    ``positionals``: the parameters given by position (``sandbox exec``'s ID); ``args``: whether a
    command follows (after ``--``, or, with ``words_end_options``, from the first plain word on).
    """

    __slots__ = ("args", "options", "positionals", "target", "words_end_options")

    def __init__(
        self,
        target: str,
        options: Mapping[str, Option],
        positionals: tuple[str, ...] = (),
        args: bool = False,
        words_end_options: bool = False,
    ) -> None:
        self.target, self.options, self.positionals = target, options, positionals
        self.args, self.words_end_options = args, words_end_options


def _at_least(low: float, kind: Callable[[str], float]) -> Convert:
    def convert(text: str) -> float:
        value = kind(text)
        if value < low:
            raise ValueError(text)
        return value

    return convert


def _enum(name: str) -> Convert:
    """An enum's value by its text; the enum class (``module:Class``) loads when a value is read."""

    def convert(text: str) -> Any:
        module, _, cls = name.partition(":")
        return getattr(importlib.import_module(module), cls)(text)

    return convert


def _path(text: str) -> Path:
    from pathlib import Path

    if not text:
        raise ValueError(text)
    return Path(text)


_EGRESS: Final = {
    "--allow-host": Option("allow_host", "many"),
    "--egress-profile": Option("egress_profile", "many"),
    "--egress": Option("egress_file", "many", _path),
}

#: Command words -> the form of their common call.
FORMS: Final[Mapping[tuple[str, ...], Form]] = {
    ("exec",): Form(
        "ironflow.cli.one_shot:run",
        {
            "--backend": Option("backend", convert=_enum("ironflow.cli.inputs:Backend")),
            "--isolation": Option("isolation", convert=_enum("ironflow.cli.inputs:Isolation")),
            "--timeout": Option("timeout", convert=_at_least(0.001, float)),
            "--provider": Option("provider_file", convert=_path),
            "--workspace": Option("workspace"),
            "--patch": Option("patch"),
            "--apply": Option("apply", "flag"),
            "--push": Option("push"),
            "--mount": Option("mount", "many"),
            "--output": Option("output", convert=_enum("ironflow.cli.formats:ResultFormat")),
            "-o": Option("output", convert=_enum("ironflow.cli.formats:ResultFormat")),
            "--stdin": Option("stdin", "flag"),
            "--no-stdin": Option("stdin", "off"),
            **_EGRESS,
        },
        args=True,
        words_end_options=True,
    ),
    ("runs", "list"): Form(
        "ironflow.cli.run_listing:run",
        {
            "--store": Option("store"),
            "--status": Option("status", convert=_enum("ironflow.engine.model:RunStatus")),
            "--limit": Option("limit", convert=_at_least(1, int)),
            "--output": Option("output", convert=_enum("ironflow.cli.formats:OutputFormat")),
            "-o": Option("output", convert=_enum("ironflow.cli.formats:OutputFormat")),
        },
    ),
    # A server's sessions only: --backend, --provider and -t take the session client (Typer's call).
    ("sandbox", "exec"): Form(
        "ironflow.cli.session_exec:run",
        {
            "--server": Option("server"),
            "--timeout": Option("timeout", convert=float),
            "--cwd": Option("cwd"),
            "--env": Option("env", "many"),
        },
        positionals=("sandbox_id",),
        args=True,
    ),
}

#: The root options (``ironflow -v exec …``): -v counts, -q is a flag.
_VERBOSE: Final = {"-v": 1, "-vv": 2, "-vvv": 3, "--verbose": 1}
_QUIET: Final = ("-q", "--quiet")


class Call:
    """A call read here: the form, its positional values and its keyword values, and the root options."""

    __slots__ = ("form", "params", "positionals", "quiet", "verbose")

    def __init__(self, form: Form, positionals: list[Any], params: dict[str, Any], verbose: int, quiet: bool) -> None:
        self.form, self.positionals, self.params = form, positionals, params
        self.verbose, self.quiet = verbose, quiet


def _options(form: Form, args: Sequence[str]) -> tuple[list[Any], dict[str, Any], int] | None:
    """The positionals and options of ``args`` up to the command, and where it starts; None to decline."""
    positionals: list[Any] = []
    params: dict[str, Any] = {}
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            return (positionals, params, index + 1) if form.args else None
        if not word.startswith("-") or word == "-":
            if len(positionals) < len(form.positionals):
                positionals.append(word)
                index += 1
                continue
            if form.args and form.words_end_options:
                return positionals, params, index
            return None
        name, equals, text = word.partition("=") if word.startswith("--") else (word, "", "")
        option = form.options.get(name)
        if option is None:
            return None
        if option.kind in ("flag", "off"):
            if equals:
                return None
            params[option.param] = option.kind == "flag"
            index += 1
            continue
        if not equals:
            index += 1
            if index >= len(args) or args[index].startswith("-"):
                return None
            text = args[index]
        try:
            value = option.convert(text)
        except ValueError:
            return None
        if option.kind == "many":
            params.setdefault(option.param, []).append(value)
        else:
            params[option.param] = value
        index += 1
    return positionals, params, index


def parse(argv: Sequence[str]) -> tuple[Call, list[str]] | None:
    """The call ``argv`` (the arguments after ``ironflow``) makes, and its command's own arguments;
    None when Typer must read it (pure, but for loading an enum's module)."""
    verbose, quiet, index = 0, False, 0
    while index < len(argv) and argv[index].startswith("-"):
        word = argv[index]
        if word in _VERBOSE:
            verbose += _VERBOSE[word]
        elif word in _QUIET:
            quiet = True
        else:
            return None
        index += 1
    if verbose and quiet:
        return None
    for words, form in FORMS.items():
        if tuple(argv[index : index + len(words)]) == words:
            read = _options(form, argv[index + len(words) :])
            if read is None or len(read[0]) < len(form.positionals):
                return None
            positionals, params, start = read
            rest = list(argv[index + len(words) + start :]) if form.args else []
            return Call(form, positionals, params, verbose, quiet), rest
    return None


def run(argv: Sequence[str]) -> None:
    """Run ``argv``'s call if it is a common one (the function exits the process); return when
    Typer must read it."""
    parsed = parse(argv)
    if parsed is None:
        return
    call, rest = parsed
    from ironflow.cli import exits, verbosity  # a call read here: ``--help`` and Typer's calls load neither

    try:
        verbosity.configure(call.verbose, call.quiet)
        module, _, name = call.form.target.partition(":")
        function = getattr(importlib.import_module(module), name)
        gc.enable()  # its modules are loaded: the command's own work runs with the collector on (see app.main)
        if call.form.args:
            function(*call.positionals, rest, **call.params)
        else:
            function(*call.positionals, **call.params)
    except KeyboardInterrupt:  # as Typer's group answers one
        exits.fail("aborted", exits.EXIT_INTERRUPTED)
    raise SystemExit(0)
