"""What the host keeps of a sandbox's output: a bounded head and tail, and what was cut (issue 34, H4)."""

from __future__ import annotations

import doctest

import pytest

from ironflow import captured
from ironflow.captured import Captured, cut_marker


def test_the_examples_hold() -> None:
    assert doctest.testmod(captured).failed == 0


def test_output_within_the_bound_is_kept_whole_and_nothing_is_said_cut() -> None:
    c = Captured("stdout", keep_bytes=5)
    for piece in (b"abc", b"defgh", b"ij"):
        c.feed(piece)
    assert (c.value(), c.total, c.cut) == (b"abcdefghij", 10, 0)


def test_a_flood_keeps_at_most_three_bounds_in_memory_and_the_last_bytes_exactly() -> None:
    c = Captured("stderr", keep_bytes=1000)
    written = b"".join(bytes([i % 251]) * 997 for i in range(5000))
    for at in range(0, len(written), 4093):
        c.feed(written[at : at + 4093])
        assert len(c._head) + len(c._tail) <= 3 * 1000 + 4093
    cut = len(written) - 2000
    assert c.value() == written[:1000] + cut_marker("stderr", cut, len(written)).encode() + written[-1000:]
    assert (c.total, c.cut) == (len(written), cut)


def test_a_zero_bound_keeps_only_the_count() -> None:
    c = Captured("stdout", keep_bytes=0)
    c.feed(b"secret-ish output")
    assert (c.value(), c.total, c.cut) == (cut_marker("stdout", 17, 17).encode(), 17, 17)


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="keep_bytes"):
        Captured("stdout", keep_bytes=-1)
