"""A parallel wave's step names (pure): both engines (ironflow's and Temporal's) refuse a wave
with two steps of one name before anything is created, with the reference's words."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["duplicate_name", "wave_duplicate_message"]


def duplicate_name(names: Sequence[str]) -> str | None:
    """The first raw name that repeats in a wave, or None.

    >>> duplicate_name(["a", "b", "a"]), duplicate_name(["a"])
    ('a', None)
    """
    seen: set[str] = set()
    for name in names:
        if name in seen:
            return name
        seen.add(name)
    return None


def wave_duplicate_message(name: str) -> str:
    """The reference's refusal, word for word (Rust ``{name:?}`` quoting)."""
    quoted = name.replace("\\", "\\\\").replace('"', '\\"')
    return f'parallel wave has two steps named "{quoted}"; each step of a wave needs its own name'
