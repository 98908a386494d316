"""What a Kubernetes session sends through exec and how its answer is read: the boot line runs
the runtime's own files from stdin, a reply cut anywhere reads the same."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.k8s.sessions import wire
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.sessions import replies

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n"
)


def _feed_bytewise(data: bytes) -> tuple[replies.ReplyParser, bytes]:
    parser = replies.ReplyParser()
    body = b"".join(piece for i in range(len(data)) for piece in parser.feed(data[i : i + 1]))
    return parser, body


def test_a_chunked_reply_cut_at_every_byte_reads_whole() -> None:
    parser, body = _feed_bytewise(CHUNKED)
    assert (parser.status, parser.done, body) == (200, True, b"helloabc")
    assert wire.content_type_of(parser.headers) == "application/x-ndjson"


def test_a_sized_reply_ends_at_its_length_and_an_empty_one_at_its_head() -> None:
    parser = replies.ReplyParser()
    assert parser.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nab") == [b"ab"]
    assert not parser.done
    assert parser.feed(b"cd") == [b"cd"]
    assert parser.done
    empty = replies.ReplyParser()
    assert empty.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == []
    assert empty.done


def test_lines_split_across_pieces_come_out_whole() -> None:
    lines = replies.LineSplitter()
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
    assert wire.kill_command(4242)[-2:] == ("4242", "9")
    assert wire.kill_command(4242, signal_number=15)[-2:] == ("4242", "15")


def test_the_signal_names_are_the_runtimes_own() -> None:
    tree = ast.parse((Path(SERVER_PATH).parent / "terminal.py").read_text())
    (listed,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SIGNALS" for t in node.targets)
    ]
    assert listed == wire.SIGNALS
    assert (wire.signal_number("sigterm"), wire.signal_number("INT")) == (15, 2)
    for bad in ("", "SEGV", "TERM\nX", "9"):
        with pytest.raises(ValueError, match="unknown signal") as refused:
            wire.signal_number(bad)
        assert "\n" not in str(refused.value)


def test_a_control_is_a_line_for_the_pod_or_a_signal() -> None:
    stdin = wire.read_control("stdin", b"a\x03", eof=True, pty=False)
    assert json.loads(stdin.frame) == {"action": "stdin", "data": "YQM=", "eof": True}
    assert stdin.frame.endswith(b"\n")
    assert stdin.frame.count(b"\n") == 1
    assert stdin.answer == {"written": 2}
    assert wire.read_control("signal", b'{"signal": "HUP"}', eof=False, pty=False) == wire.Control(signal=1)
    resize = wire.read_control("resize", b'{"cols": 100, "rows": 30}', eof=False, pty=True)
    assert (json.loads(resize.frame), resize.answer) == (
        {"action": "resize", "cols": 100, "rows": 30},
        {"cols": 100, "rows": 30},
    )
    for action, body, pty, problem in (
        ("resize", b'{"cols": 100}', False, "no terminal"),
        ("resize", b'{"cols": 0}', True, "cols and rows"),
        ("resize", b"[1]", True, "JSON object"),
        ("signal", b'{"signal": "SEGV"}', True, "unknown signal"),
        ("signal", b"{", True, "Expecting"),
    ):
        with pytest.raises(ValueError, match=problem):
            wire.read_control(action, body, eof=False, pty=pty)


def test_a_line_open_past_its_bound_is_the_sandboxs_failure_and_the_last_line_is_kept() -> None:
    lines = replies.LineSplitter(max_line_bytes=8)
    assert lines.feed(b"12345678\n\n1234") == [b"12345678"]
    assert lines.rest() == [b"1234"]
    assert lines.rest() == []
    with pytest.raises(errors.SandboxError, match="over 8 bytes"):
        lines.feed(b"123456789")


def test_header_lines_bracket_an_ipv6_host_and_refuse_a_line_break_in_any_value() -> None:
    assert replies.header_lines("sandbox", None, {"A": "1"}) == b"Host: sandbox\r\nA: 1\r\n"
    assert replies.header_lines("10.0.0.1", 80, {}) == b"Host: 10.0.0.1:80\r\n"
    for bad in ("t\r\nX-Evil: 1", "t\nx", "t\rx"):
        with pytest.raises(errors.ConfigError, match="line break"):
            replies.header_lines("h", 1, {"Authorization": f"Bearer {bad}"})


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "status line is 'SSH-2.0-OpenSSH'"),
        (b"HTTP/1.1 OK 200\r\n\r\n", "status is b'OK'"),
        (b"HTTP/1.1 99 Low\r\n\r\n", "status line is"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "length is b'-1'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_000\r\n\r\n", "length is b'1_000'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", "length is"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+5\r\n", "chunk size is b'+5'"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * replies.MAX_HEAD_BYTES, "a line over"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"0" * 5000, "a line over"),
    ],
)
def test_a_reply_that_is_not_http_or_never_ends_its_head_is_the_sandboxs_failure(reply: bytes, said: str) -> None:
    """Cut anywhere, a malformed reply is one SandboxError, never a ValueError or a growing buffer."""
    for cut in (1, 7, len(reply)):
        with pytest.raises(errors.SandboxError, match=f"malformed reply: .*{re.escape(said)}"):
            _feed_in_pieces(reply, cut)


def _feed_in_pieces(reply: bytes, size: int) -> None:
    parser = replies.ReplyParser()
    for i in range(0, len(reply), size):
        parser.feed(reply[i : i + size])
