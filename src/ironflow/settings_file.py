"""Typed reading of a settings file (YAML mapping): every error names the key path.

The one reader behind the provider files of every backend. A :class:`Section` is one
mapping of the file at a key path (``pod.resources``); its accessors check one value's
type and say which key was wrong (``pod.resources.memory: must be a string, got int``).
An unknown key fails with the nearest known one (``unknown key 'namspace'; did you mean
'namespace'?``), so a typo never silently falls back to a default.

It is also the one decoder of every structured file or value the CLI reads (step files,
``--input``, fake-model scripts, kubeconfigs before their loader parses them):
:func:`read_text` bounds the size and refuses bytes that are not UTF-8, :func:`decode` bounds
the nesting (:data:`MAX_DEPTH`; a 5,000-deep list would exhaust the interpreter's stack), and
every failure is one :class:`~ironflow.errors.ConfigError`.

Pure: :func:`parse` and :func:`decode` take the text; only :func:`read_text` reads a file. It
never builds a backend's settings: the backend's own ``settings_file`` module maps sections to
builders.
"""

from __future__ import annotations

import difflib
import functools
import json
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ironflow import errors

if TYPE_CHECKING:
    import yaml

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "Section",
    "decode",
    "http_url",
    "load",
    "parse",
    "read",
    "read_text",
    "unknown_key_message",
    "unknown_name_message",
]

#: The largest file :func:`read_text` reads: settings, steps and inputs are a few KiB.
MAX_FILE_BYTES: Final = 8 << 20
#: The deepest nesting of lists and mappings :func:`decode` accepts (pod specs nest about ten).
MAX_DEPTH: Final = 64


def unknown_key_message(key: str, known: Collection[str]) -> str:
    """``unknown key 'namspace'; did you mean 'namespace'?``, or the known keys when none is near."""
    return unknown_name_message("key", key, sorted(known))


def unknown_name_message(what: str, name: str, known: Sequence[str]) -> str:
    """The one line for a name that is none of ``known``: the nearest known one, or all of them in
    their order when none is near (settings keys, ``sandbox render`` patterns).

    >>> unknown_name_message("pattern", "ephemral", ["ephemeral", "warm-pool"])
    "unknown pattern 'ephemral'; did you mean 'ephemeral'?"
    >>> unknown_name_message("pattern", "nope", ["ephemeral", "warm-pool"])
    "unknown pattern 'nope'; known: ephemeral, warm-pool"
    """
    near = difflib.get_close_matches(name, list(known), n=1)
    if near:
        return f"unknown {what} '{name}'; did you mean '{near[0]}'?"
    return f"unknown {what} '{name}'; known: {', '.join(known)}"


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


@functools.cache
def _bounded_loader() -> type[yaml.SafeLoader]:
    """PyYAML's safe loader, refusing to compose past :data:`MAX_DEPTH` (its composer recurses).

    Made at the first decode: every command imports this module (through ``ironflow.steps``),
    few read YAML, and PyYAML is a tenth of a command's start-up."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self._depth >= MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            self._depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return BoundedLoader


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line (PyYAML's message spans several, with a snippet of the file)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).splitlines()[0]


def _too_deep(value: object) -> bool:
    """Whether ``value`` nests lists and mappings past :data:`MAX_DEPTH` (a YAML alias may make
    one shared or cyclic: each part is walked again only deeper, so a cycle ends at the bound)."""
    deepest: dict[int, int] = {}
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list) or deepest.get(id(item), 0) >= depth:
            continue
        if depth > MAX_DEPTH:
            return True
        deepest[id(item)] = depth
        stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def decode(text: str, *, source: str, as_json: bool = False) -> Any:
    """The value of a YAML text (``as_json``: JSON), nested at most :data:`MAX_DEPTH` deep;
    ``source`` names it in errors (``step file 'a.yaml'``, ``--input``).

    Raises:
        ConfigError: one line: not YAML (JSON), too large, or nested too deep.
    """
    import yaml  # see _bounded_loader

    if len(text) > MAX_FILE_BYTES:
        raise errors.ConfigError(f"{source} is larger than {MAX_FILE_BYTES >> 20} MiB")
    kind = "JSON" if as_json else "YAML"
    try:
        value = json.loads(text) if as_json else yaml.load(text, Loader=_bounded_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise errors.ConfigError(f"{source} is not valid YAML: {_yaml_problem(exc)}") from None
    except json.JSONDecodeError as exc:
        raise errors.ConfigError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:  # JSON's decoder recurses in C: past the interpreter's limit
        raise errors.ConfigError(f"{source} is not valid {kind}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # a number of more than 4,300 digits, say
        raise errors.ConfigError(f"{source} is not valid {kind}: {str(exc).split(';')[0][:160]}") from None
    if _too_deep(value):
        raise errors.ConfigError(f"{source} is not valid {kind}: nested deeper than {MAX_DEPTH} levels")
    return value


def read_text(path: str | Path, *, what: str) -> str:
    """The text of one file, at most :data:`MAX_FILE_BYTES`; ``what`` names its kind in errors.

    Raises:
        ConfigError: it cannot be read, is too large, or is not UTF-8.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise errors.ConfigError(f"cannot read {what} '{path}': {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise errors.ConfigError(f"{what} '{path}' is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise errors.ConfigError(f"{what} '{path}' is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None


def _url_problem(value: str, *, with_path: bool) -> str | None:
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", a port out of range or not a number
        return str(exc).split(";")[0][:80]
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https"):
        return "the scheme must be http or https"
    if not host or not host.isascii() or not host.isprintable() or " " in host:
        return "it names no host name or address"
    if parts.username is not None or parts.password is not None:
        return "a credential does not belong in it"
    if parts.query or parts.fragment or (not with_path and parts.path not in ("", "/")):
        return "it has a path, query or fragment" if not with_path else "it has a query or fragment"
    if port == 0:
        return "port 0 is no server's"
    return None


def http_url(value: str, *, what: str, with_path: bool = False) -> urllib.parse.SplitResult:
    """``value`` split, if it is an ``http(s)://HOST[:PORT]`` URL (``with_path``: a path may
    follow) with no credential, query or fragment: the one check of a server URL an option or a
    file names (pure).

    Raises:
        ConfigError: one line naming ``what`` and the problem; the URL is shown only when it
            holds no ``@`` (a credential never reaches a message).
    """
    if (problem := _url_problem(value, with_path=with_path)) is None:
        return urllib.parse.urlsplit(value)
    shown = "" if "@" in value else f" '{errors.truncate(value, 80)}'"
    raise errors.ConfigError(f"invalid {what}{shown}: {problem}; use http://HOST:PORT")


def _mapping(text: str, source: str) -> Mapping[str, Any]:
    data = decode(text, source=source)
    if not isinstance(data, Mapping):
        raise errors.ConfigError(f"{source} must hold a mapping of settings")
    return data


def parse(text: str, *, source: str, known: Collection[str], refused: Mapping[str, str] | None = None) -> Section:
    """The top section of a YAML settings text; ``source`` names it in errors (a file name)."""
    return Section(_mapping(text, source), known=known, refused=refused)


def read(path: str | Path, *, what: str) -> Mapping[str, Any]:
    """The top mapping of one settings file, keys not yet checked: for a file of two forms
    whose known keys depend on which one it is. ``what`` names its kind in errors."""
    return _mapping(read_text(path, what=what), f"{what} '{path}'")


def load(path: str | Path, *, what: str, known: Collection[str], refused: Mapping[str, str] | None = None) -> Section:
    """Read and parse one settings file; ``what`` names its kind (``provider file``) in errors."""
    return Section(read(path, what=what), known=known, refused=refused)
