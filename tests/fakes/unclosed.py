"""What the garbage collector finds left open: unclosed sessions, connectors, sockets.

A client that was never closed is found only when the collector gets to it, which may be
during a later test; collecting on purpose right after the code under test puts the finding
on the test that caused it.
"""

from __future__ import annotations

import gc
import sys
import warnings

__all__ = ["unclosed_after_collect"]


def unclosed_after_collect() -> list[str]:
    """Collect now; the ResourceWarnings and unraisable errors the finalizers raised."""
    found: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: found.append(repr(unraisable.exc_value))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
    finally:
        sys.unraisablehook = previous
    return found + [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
