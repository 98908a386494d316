"""``--output`` of the commands: the table-or-JSON reports (``check``, ``reap``, ``runs``, ``sandbox ls``),
the text-or-JSON single things (``sandbox open``) and the YAML-or-JSON Kubernetes objects (``render``,
``manifests``, ``sandbox render``), printed one way; and how long ago something started, as their tables say it."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import typer
import yaml

__all__ = ["ManifestFormat", "OutputFormat", "TextFormat", "age", "emit_objects"]


class OutputFormat(StrEnum):
    """A report for people (a table) or for programs (JSON)."""

    TABLE = "table"
    JSON = "json"


class TextFormat(StrEnum):
    """One thing for a shell (a line of text, e.g. an id) or for programs (a JSON object)."""

    TEXT = "text"
    JSON = "json"


class ManifestFormat(StrEnum):
    """Kubernetes objects as YAML documents or one JSON list."""

    YAML = "yaml"
    JSON = "json"


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
