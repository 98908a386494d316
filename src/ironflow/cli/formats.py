"""``--output`` of the commands: the table, JSON or YAML reports (``check``, ``reap``, ``runs``, ``ps``,
``sandbox ls``), the text-or-JSON single things (``sandbox open``; ``agent`` and ``exec`` also YAML), and the
YAML-or-JSON Kubernetes objects (``render``, ``manifests``, ``sandbox render``), printed one way
(:func:`document`); and how long ago something started, as their tables say it."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import typer
import yaml

__all__ = ["ManifestFormat", "OutputFormat", "ResultFormat", "TextFormat", "age", "document", "emit_objects"]


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

    >>> print(document({"id": "r1", "steps": [1, 2]}, OutputFormat.YAML))
    id: r1
    steps:
    - 1
    - 2
    """
    text = json.dumps(doc, indent=indent, default=str)
    if fmt.value != "yaml":
        return text
    # Through JSON, so YAML holds exactly what JSON would (str-valued enums, dates as JSON has them).
    return yaml.safe_dump(json.loads(text), sort_keys=False, width=120, allow_unicode=True).rstrip("\n")


def emit_objects(objects: list[dict[str, Any]], fmt: ManifestFormat) -> None:
    """Print Kubernetes objects on stdout as ``fmt`` says: YAML documents, or one JSON list."""
    if fmt is ManifestFormat.JSON:
        typer.echo(json.dumps(objects, indent=2))
    else:
        typer.echo(yaml.safe_dump_all(objects, sort_keys=False, width=120), nl=False)


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
