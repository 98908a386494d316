"""``--output`` of the commands: the table, JSON or YAML reports (``check``, ``reap``, ``runs``, ``ps``,
``sandbox ls``), the text-or-JSON single things (``sandbox open``; ``agent`` and ``exec`` also YAML), and the
YAML-or-JSON Kubernetes objects (``render``, ``manifests``, ``sandbox render``), printed one way
(:func:`document`); how long ago something started, as their tables say it; and text from a sandbox or a
model made safe for a terminal (:func:`printable`, :class:`TerminalStream`)."""

from __future__ import annotations

import codecs
import json
from enum import StrEnum
from typing import Any, BinaryIO, Final, TextIO

__all__ = [
    "ManifestFormat",
    "OutputFormat",
    "ResultFormat",
    "TerminalStream",
    "TextFormat",
    "age",
    "document",
    "emit_objects",
    "for_terminal",
    "printable",
    "rounded_costs",
]

#: Each control character a terminal would act on (C0 but newline and tab, DEL, C1), as the
#: escape that shows it: ESC starts CSI and OSC sequences (clear the screen, write the clipboard,
#: retitle the window), and U+009B is CSI on its own.
_SHOWN: Final = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


class OutputFormat(StrEnum):
    """A report for people (a table) or for programs (JSON or YAML: the same document)."""

    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


class TextFormat(StrEnum):
    """One thing for a shell (a line of text, e.g. an id) or for programs (a JSON object)."""

    TEXT = "text"
    JSON = "json"


class ResultFormat(StrEnum):
    """A step's result (``agent``, ``exec``, ``sandbox diff``): the answer or output alone, or it
    with its usage, exit code and patch as one JSON or YAML document."""

    TEXT = "text"
    JSON = "json"
    YAML = "yaml"


class ManifestFormat(StrEnum):
    """Kubernetes objects as YAML documents or one JSON list."""

    YAML = "yaml"
    JSON = "json"


def document(doc: Any, fmt: StrEnum, *, indent: int | None = 2) -> str:
    """``doc`` (plain JSON values) as ``fmt`` says: ``yaml``, else JSON; no trailing newline (pure).
    Every ``…cost_usd`` in it, at any depth, is shown to 6 significant digits (:func:`rounded_costs`).

    >>> print(document({"id": "r1", "steps": [1, 2], "cost_usd": 7.000000000000001e-05}, OutputFormat.YAML))
    id: r1
    steps:
    - 1
    - 2
    cost_usd: 7.0e-05
    """
    text = json.dumps(rounded_costs(doc), indent=indent, default=str)
    if fmt.value != "yaml":
        return text
    # Through JSON, so YAML holds exactly what JSON would (str-valued enums, dates as JSON has them).
    import yaml  # only for -o yaml: a command's start-up does not pay for PyYAML

    return yaml.safe_dump(json.loads(text), sort_keys=False, width=120, allow_unicode=True).rstrip("\n")


def rounded_costs(doc: Any) -> Any:
    """``doc`` with each float under a key ending in ``cost_usd`` as :func:`~ironflow.results.shown_usd`
    shows it (6 significant digits, no float noise such as ``7.000000000000001e-05``); every other
    value as it is (pure).

    >>> rounded_costs({"steps": [{"cost_usd": 0.1 + 0.2, "value": 0.5}], "total_cost_usd": 12.3456789})
    {'steps': [{'cost_usd': 0.3, 'value': 0.5}], 'total_cost_usd': 12.3457}
    """
    from ironflow.results import shown_usd  # the results' module: a command that prints a document

    if isinstance(doc, dict):
        return {
            key: shown_usd(value)
            if isinstance(key, str) and key.endswith("cost_usd") and isinstance(value, float)
            else rounded_costs(value)
            for key, value in doc.items()
        }
    if isinstance(doc, list | tuple):
        return [rounded_costs(value) for value in doc]
    return doc


def emit_objects(objects: list[dict[str, Any]], fmt: ManifestFormat) -> None:
    """Print Kubernetes objects on stdout as ``fmt`` says: YAML documents, or one JSON list."""
    if fmt is ManifestFormat.JSON:
        print(json.dumps(objects, indent=2))
    else:
        import yaml

        print(yaml.safe_dump_all(objects, sort_keys=False, width=120), end="")


def age(seconds: float) -> str:
    """A duration in its largest whole unit, as a table shows an age (a clock skew's negative is 0s).

    >>> [age(s) for s in (-5, 59, 90, 7200, 3 * 86400)]
    ['0s', '59s', '2m', '2h', '3d']
    """
    seconds = max(seconds, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def printable(text: str) -> str:
    r"""``text`` with every control character shown as its escape, newline and tab kept (pure): what a
    sandbox or a model wrote is printed for people, never obeyed by their terminal.

    >>> printable("ok\x1b]52;c;aGk=\x07 \x1b[2J\u009b1m\tend\n")
    'ok\\x1b]52;c;aGk=\\x07 \\x1b[2J\\x9b1m\tend\n'
    """
    return text.translate(_SHOWN)


def for_terminal(text: str, stream: TextIO) -> str:
    """``text`` as :func:`printable` makes it when ``stream`` is a terminal; as it is for a pipe or a file."""
    return printable(text) if stream.isatty() else text


class TerminalStream:
    """Bytes of a command's output to ``stream``: as they are to a pipe or a file (the command's
    own bytes), decoded and :func:`printable` to a terminal. A character or escape cut between
    two pieces is decoded whole; nothing is held but its unfinished bytes."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.terminal = stream.isatty()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write(self, data: bytes, *, final: bool = False) -> None:
        self.stream.flush()  # what was printed before, first
        if self.terminal:
            self.stream.write(printable(self._decoder.decode(data, final)))
            self.stream.flush()
            return
        out: BinaryIO = self.stream.buffer
        out.write(data)
        out.flush()
