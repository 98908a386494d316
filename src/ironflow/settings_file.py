"""Typed reading of a settings file (YAML mapping): every error names the key path.

The one reader behind the provider files of every backend. A :class:`Section` is one
mapping of the file at a key path (``pod.resources``); its accessors check one value's
type and say which key was wrong (``pod.resources.memory: must be a string, got int``).
An unknown key fails with the nearest known one (``unknown key 'namspace'; did you mean
'namespace'?``), so a typo never silently falls back to a default.

Pure: :func:`parse` takes the text; only :func:`load` reads a file. It never builds a
backend's settings: the backend's own ``settings_file`` module maps sections to builders.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import yaml

from ironflow import errors

__all__ = ["Section", "load", "parse", "read", "unknown_key_message"]


def unknown_key_message(key: str, known: Collection[str]) -> str:
    """``unknown key 'namspace'; did you mean 'namespace'?``, or the known keys when none is near."""
    near = difflib.get_close_matches(key, list(known), n=1)
    if near:
        return f"unknown key '{key}'; did you mean '{near[0]}'?"
    return f"unknown key '{key}'; known: {', '.join(sorted(known))}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Section:
    """One mapping of a settings file, at ``path``, holding only ``known`` keys.

    ``refused`` maps a key to why it never belongs in a file (a secret, say): such a key
    fails with that reason instead of the unknown-key message.

    >>> s = Section({"namespace": "agents"}, known=("namespace", "image"))
    >>> s.text("namespace"), s.has("image")
    ('agents', False)
    >>> Section({"namspace": "x"}, known=("namespace",))
    Traceback (most recent call last):
    ironflow.errors.ConfigError: unknown key 'namspace'; did you mean 'namespace'?
    """

    def __init__(
        self,
        data: object,
        *,
        known: Collection[str],
        path: str = "",
        refused: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(data, Mapping):
            raise errors.ConfigError(f"{path or 'the file'}: must be a mapping, got {type(data).__name__}")
        for key in data:
            if refused and key in refused:
                raise errors.ConfigError(f"{_join(path, str(key))}: refused: {refused[key]}")
            if key not in known:
                prefix = f"{path}: " if path else ""
                raise errors.ConfigError(prefix + unknown_key_message(str(key), known))
        self.data: Mapping[str, Any] = data
        self.path = path

    def key_path(self, key: str) -> str:
        """The full path of ``key`` in the file, for messages."""
        return _join(self.path, key)

    def error(self, key: str, problem: str) -> errors.ConfigError:
        """A :class:`~ironflow.errors.ConfigError` ``{path}: {problem}`` (for checks the accessors do not make)."""
        return errors.ConfigError(f"{self.key_path(key)}: {problem}")

    def has(self, key: str) -> bool:
        """Set and not null (a ``key:`` with no value counts as absent)."""
        return self.data.get(key) is not None

    def require(self, *keys: str) -> None:
        for key in keys:
            if not self.has(key):
                raise self.error(key, "is required")

    def _get(self, key: str) -> Any:
        """The value at ``key``; a missing or null key is "is required", never a KeyError."""
        if not self.has(key):
            raise self.error(key, "is required")
        return self.data[key]

    def _wrong(self, key: str, what: str) -> errors.ConfigError:
        return self.error(key, f"must be {what}, got {type(self.data[key]).__name__}")

    def text(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def number(self, key: str) -> float:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(key, "a number")
        return float(value)

    def integer(self, key: str) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer")
        return value

    def optional_text(self, key: str) -> str | None:
        return self.text(key) if self.has(key) else None

    def optional_integer(self, key: str) -> int | None:
        return self.integer(key) if self.has(key) else None

    def str_map(self, key: str) -> dict[str, str]:
        value = self._get(key)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self._wrong(key, "a mapping of strings to strings (quote numbers and booleans)")
        return dict(value)

    def str_list(self, key: str) -> list[str]:
        value = self._get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(key, "a list of strings")
        return list(value)

    def section(self, key: str, known: Collection[str]) -> Section:
        return Section(self._get(key), known=known, path=self.key_path(key))

    def items(self, key: str, known: Collection[str]) -> list[Section]:
        """Each mapping of the list at ``key``, at ``key[i]``."""
        value = self._get(key)
        if not isinstance(value, list):
            raise self._wrong(key, "a list")
        return [Section(item, known=known, path=f"{self.key_path(key)}[{i}]") for i, item in enumerate(value)]


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line (PyYAML's message spans several, with a snippet of the file)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).splitlines()[0]


def _mapping(text: str, source: str) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{source} is not valid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(data, Mapping):
        raise errors.ConfigError(f"{source} must hold a mapping of settings")
    return data


def parse(text: str, *, source: str, known: Collection[str], refused: Mapping[str, str] | None = None) -> Section:
    """The top section of a YAML settings text; ``source`` names it in errors (a file name)."""
    return Section(_mapping(text, source), known=known, refused=refused)


def read(path: str | Path, *, what: str) -> Mapping[str, Any]:
    """The top mapping of one settings file, keys not yet checked: for a file of two forms
    whose known keys depend on which one it is. ``what`` names its kind in errors."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {what} '{path}': {exc.strerror}") from None
    return _mapping(text, f"{what} '{path}'")


def load(path: str | Path, *, what: str, known: Collection[str], refused: Mapping[str, str] | None = None) -> Section:
    """Read and parse one settings file; ``what`` names its kind (``provider file``) in errors."""
    return Section(read(path, what=what), known=known, refused=refused)
