"""Kubeconfig files before ``kubernetes_asyncio`` loads them: which file the default names, and
each file's YAML through the one bounded decoder.

The loader parses with ``yaml.safe_load``, which recurses: a 5,000-deep kubeconfig would end in
a ``RecursionError``. Decoding it first with :func:`ironflow.settings_file.decode` turns that
into one line (``nested deeper than 64 levels``). Never reads a credential out of the file and
never repeats its text in an error. Imports no Kubernetes client: only ``kube/api.py`` does.
The loader's files of inline data live in memory (:func:`in_memory_file`), never on disk.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ironflow import errors, settings_file

__all__ = ["check_files", "default_path", "in_memory_file", "value"]


def default_path() -> str | None:
    """``$KUBECONFIG`` (as given: it may join several files) when one of its files exists, else
    ``~/.kube/config`` when it exists, else None (the caller may try the in-cluster config)."""
    raw = os.environ.get("KUBECONFIG", "")
    paths = [p for p in raw.split(os.pathsep) if p]
    if paths:
        return raw if any(Path(p).expanduser().exists() for p in paths) else None
    home = Path.home() / ".kube" / "config"
    return str(home) if home.exists() else None


def value(text: str) -> Any:
    """The kubeconfig's value, bounded as every file the CLI reads.

    Raises:
        ValueError: one line (``kube/api.py`` names the source before it, as for the loader's errors).
    """
    try:
        return settings_file.decode(text, source="the kubeconfig")
    except errors.ConfigError as exc:
        raise ValueError(exc.message) from None


def check_files(paths: str) -> None:
    """Decode each kubeconfig file of ``paths`` (``KUBECONFIG`` may join several) before the loader
    reads it; a missing or unreadable one is left for the loader to name, as it always did."""
    for raw in paths.split(os.pathsep):
        try:
            text = Path(raw).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        value(text)


#: Each content's path, so a reload (a fresh token, another client) reuses the file it made.
_in_memory: dict[bytes, str] = {}


def in_memory_file(content: str | bytes) -> str:
    """A path that reads ``content`` and dies with this process: ``/proc/self/fd/N`` of a memfd.

    The loader writes every ``*-data`` field (a client's private key among them) to a file of
    its own in ``/tmp`` that only ``atexit`` removes, so a killed process left its key on disk.
    It calls this instead (``kube/api.py``). Close-on-exec: no sandbox a worker starts holds it.
    """
    data = content.encode() if isinstance(content, str) else content
    path = _in_memory.get(data)
    if path is None:
        fd = os.memfd_create("ironflow-kubeconfig", os.MFD_CLOEXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        path = _in_memory[data] = f"/proc/self/fd/{fd}"
    return path
