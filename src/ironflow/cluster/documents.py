"""Kubernetes objects as commented YAML files: the value types and their text (pure).

The example manifests under ``examples/k8s/sandbox/`` are this module's output, not
hand-edited YAML, so their comments (why a rule exists, what to uncomment) travel with
the objects. Never reads or writes files: a caller writes :func:`file_text` where it wants.

Formatting is fixed so that regenerating a file changes nothing: keys in insertion
order, sequences indented under their key, strings that YAML would read as another
type (``"53"``, ``"true"``, ``"*"``) double-quoted, multi-line strings as ``|`` blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["Document", "ManifestFile", "dump_json", "dump_yaml", "file_text"]


@dataclass(frozen=True)
class Document:
    """One object, the comment above it, and comment lines after it (e.g. a rule to uncomment).

    ``trailer`` is raw text placed right after the object's last line, so a trailer
    indented like the object's last list continues that list when uncommented.
    """

    body: Mapping[str, Any]
    comment: str = ""
    trailer: str = ""


@dataclass(frozen=True)
class ManifestFile:
    """A file of the example set: its path relative to the set's root, and its documents."""

    path: str
    documents: tuple[Document, ...]

    @property
    def objects(self) -> list[Mapping[str, Any]]:
        return [d.body for d in self.documents]


class _Dumper(yaml.SafeDumper):
    """Indents sequences under their key, as kubectl and the seed manifests do."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    node = dumper.represent_scalar("tag:yaml.org,2002:str", value)
    analysis = dumper.analyze_scalar(value)
    implicit = dumper.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]
    if not analysis.allow_block_plain or implicit != "tag:yaml.org,2002:str":
        node.style = '"'
    return node


_Dumper.add_representer(str, _represent_str)


def _comment_lines(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines())


def dump_yaml(body: Mapping[str, Any]) -> str:
    """One object as block YAML in the fixed format of this module."""
    return yaml.dump(dict(body), Dumper=_Dumper, sort_keys=False, width=1_000, allow_unicode=True)


def file_text(documents: Iterable[Document]) -> str:
    """The YAML text of a file: each document's comment, object and trailer, ``---`` between."""
    parts = [_comment_lines(d.comment) + dump_yaml(d.body) + d.trailer for d in documents]
    return "---\n".join(parts)


def dump_json(objects: Iterable[Mapping[str, Any]]) -> str:
    """Objects as one ``v1`` ``List`` in JSON, which ``kubectl apply -f -`` accepts."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=2) + "\n"
