"""``--untrusted FILE`` (or ``LABEL=FILE``, repeatable): files the agent reads as data, in the
prompt's nonce-delimited blocks (:mod:`ironflow.prompts`). Each bad file is one line, exit 2; a
message names the file, never its content."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Final

import typer

from ironflow import errors, prompts
from ironflow.cli import exits

__all__ = ["UntrustedOption", "label_and_path", "prompt_with"]

UntrustedOption = Annotated[
    list[str] | None,
    typer.Option(
        "--untrusted",
        metavar="[LABEL=]FILE",
        help="A file the agent reads as data, never as instructions (an issue, a page); repeatable.",
        show_default=False,
    ),
]

_NOT_LABEL: Final = re.compile(r"[^A-Za-z0-9._-]+")


def label_and_path(value: str) -> tuple[str, Path]:
    """``LABEL=FILE`` when the part before the first ``=`` is a label, else the file, labelled by
    its name (characters a label cannot hold become ``_``); ``./a=b`` names a file ``a=b``.

    >>> label_and_path("issue=/tmp/body.txt"), label_and_path("/tmp/my page.html")
    (('issue', PosixPath('/tmp/body.txt')), ('my_page.html', PosixPath('/tmp/my page.html')))
    """
    label, sep, rest = value.partition("=")
    if sep and prompts.label_valid(label) and rest:
        return label, Path(rest)
    path = Path(value)
    name = _NOT_LABEL.sub("_", path.name).lstrip("._-")[:64]
    return (name or "file"), path


def _read(value: str, path: Path) -> str:
    """The file's text, or exit 2 naming it: missing, unreadable, too large, or not UTF-8 text."""
    try:
        with path.open("rb") as fh:
            data = fh.read(prompts.MAX_BLOCK_BYTES + 1)
    except FileNotFoundError:
        exits.fail(f"--untrusted {value}: no such file")
    except IsADirectoryError:
        exits.fail(f"--untrusted {value} is a directory: pass a file")
    except OSError as exc:
        exits.fail(f"--untrusted {value}: cannot read it ({exc.strerror or type(exc).__name__})")
    if len(data) > prompts.MAX_BLOCK_BYTES:
        exits.fail(f"--untrusted {value} is over {prompts.MAX_BLOCK_BYTES} bytes: pass a part of it")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:
        exits.fail(f"--untrusted {value} is binary (not UTF-8 text): pass a text file")
    return text


def prompt_with(instructions: str, values: list[str] | None) -> str:
    """The prompt text for one step: ``instructions``, then each file in its block, under a fresh
    nonce; ``instructions`` alone when there are none."""
    if not values:
        return instructions
    try:
        prompt = prompts.Prompt(instructions)
        for value in values:
            label, path = label_and_path(value)
            prompt = prompt.untrusted(label, _read(value, path))
    except errors.ConfigError as exc:
        exits.fail(str(exc))
    return prompt.for_step()
