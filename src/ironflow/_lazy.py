"""Lazy package facades: a package exports its public names without importing their modules.

Importing ``ironflow.auth_proxy.policy`` must not start an HTTP stack because the
package facade re-exports the server: pure modules stay importable (and testable) alone.
A facade lists ``{submodule: names}``; a name is imported on first use (PEP 562) and
cached in the package. Type checkers read the same names from a ``TYPE_CHECKING`` block.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["deprecated_exports", "lazy_exports", "module"]


def module(name: str) -> types.ModuleType:
    """A stand-in for the module ``name`` that imports it at its first attribute use, not now.

    For a module that a command's path names but only some of its commands call: ``asyncio`` in
    the sandbox's process code, which ``ironflow exec`` runs blocking (asyncio's import was a third
    of that command's start). Nothing is put in ``sys.modules`` until the import, so code that asks
    whether a module was imported is told the truth; the import itself takes the import lock.
    """
    return _Deferred(name)


class _Deferred(types.ModuleType):
    def __getattr__(self, attribute: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attribute)


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``, resolving each name from its submodule."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def deprecated_exports(package: str, exports: Mapping[str, Sequence[str]], *, instead: str) -> Callable[[str], object]:
    """A ``__getattr__`` like :func:`lazy_exports` for names that moved: each use warns.

    ``instead`` names the new home in the warning (``"ironflow.sessions"``). The value is
    not cached, so every ``from package import name`` warns, not only the first.
    """
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(
            f"{package}.{name} moved: import it from {instead} (the old name goes in the next release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)

    return __getattr__
