"""What a Kubernetes session sends through exec and how its answer is read: the boot line runs
the runtime's own files from stdin, a reply cut anywhere reads the same."""

from __future__ import annotations

import pytest

from ironflow.k8s.sessions import wire

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n"
)


def _feed_bytewise(data: bytes) -> tuple[wire.ReplyParser, bytes]:
    parser = wire.ReplyParser()
    body = b"".join(piece for i in range(len(data)) for piece in parser.feed(data[i : i + 1]))
    return parser, body


def test_a_chunked_reply_cut_at_every_byte_reads_whole() -> None:
    parser, body = _feed_bytewise(CHUNKED)
    assert (parser.status, parser.done, body) == (200, True, b"helloabc")
    assert wire.content_type_of(parser.headers) == "application/x-ndjson"


def test_a_sized_reply_ends_at_its_length_and_an_empty_one_at_its_head() -> None:
    parser = wire.ReplyParser()
    assert parser.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nab") == [b"ab"]
    assert not parser.done
    assert parser.feed(b"cd") == [b"cd"]
    assert parser.done
    empty = wire.ReplyParser()
    assert empty.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == []
    assert empty.done


def test_lines_split_across_pieces_come_out_whole() -> None:
    lines = wire.LineSplitter()
    assert lines.feed(b'{"a"') == []
    assert lines.feed(b': 1}\n{"b": 2}\n{"c"') == [b'{"a": 1}', b'{"b": 2}']
    assert lines.feed(b": 3}\n") == [b'{"c": 3}']


def test_a_request_part_with_a_line_break_is_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        wire.render_request("n", "GET", "/x HTTP/1.1\r\nEvil: 1", b"")
    with pytest.raises(ValueError, match="line break"):
        wire.render_request("n", "POST", "/x", b"", content_type="a\r\nb: c")


def test_the_kill_line_never_names_group_one_or_below() -> None:
    for pid in (0, 1, -5):
        with pytest.raises(ValueError, match="refusing"):
            wire.kill_command(pid)
    assert wire.kill_command(4242)[-1] == "4242"
