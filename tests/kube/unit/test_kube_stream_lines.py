"""A followed pod log's lines are bounded on the worker: a line longer than ``max_line`` is given
cut and its rest dropped as it streams (issue 34, H4: the pod writes what it likes)."""

from __future__ import annotations

import tracemalloc
from typing import Any

from ironflow.kube import reading


class _Body:
    """A response whose body is ``pieces``, read as aiohttp's ``readany`` gives them."""

    def __init__(self, pieces: Any) -> None:
        self.content = self
        self._pieces = iter(pieces)

    async def readany(self) -> bytes:
        return next(self._pieces, b"")


def _body(line_bytes: int, piece: int = 1 << 16) -> Any:
    yield b"first\n"
    for _ in range(line_bytes // piece):
        yield b"a" * piece
    yield b"\nlast"


async def _lines(pieces: Any, max_line: int | None) -> list[bytes]:
    return [line async for line in reading.lines(_Body(pieces), "follow log", max_line=max_line)]  # type: ignore[arg-type]


async def test_a_line_past_the_bound_is_given_cut_and_never_held_whole() -> None:
    tracemalloc.start()
    try:
        found = [len(line) if line.startswith(b"a") else line async for line in _lined(_body(256 << 20), 1 << 20)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == [b"first", 1 << 20, b"last"]
    assert peak < 8 << 20, f"held {peak >> 20} MiB of a 256 MiB line"


async def test_without_a_bound_a_long_line_is_whole() -> None:
    assert await _lines(_body(4 << 20), None) == [b"first", b"a" * (4 << 20), b"last"]


async def test_lines_within_the_bound_and_one_cut_inside_a_piece_are_kept_apart() -> None:
    pieces = [b"ab\r\ncdefgh", b"ij\nk", b"l\n", b"mnopqrstuvwxyz"]
    assert await _lines(pieces, 4) == [b"ab", b"cdef", b"kl", b"mnop"]


async def _lined(pieces: Any, max_line: int) -> Any:
    async for line in reading.lines(_Body(pieces), "follow log", max_line=max_line):  # type: ignore[arg-type]
        yield line
