"""The egress proxy's request heads and answers, as values (pure).

A client of the egress proxy sends one head: ``CONNECT host:port`` (a tunnel, for TLS) or an
absolute-form request ``GET http://host[:port]/path`` (plain HTTP forwarding). :func:`parse_head`
reads it strictly (one request line, ``name: value`` header lines, no folding, no control bytes,
no ``https://`` forwarding, one body framing) and :class:`MalformedHead` names what is wrong,
never echoing the head (it carries the token). :func:`origin_head` is the head sent upstream for
plain HTTP: origin-form target, ``Host`` from the URL, no ``Proxy-Authorization``, no hop-by-hop
header, ``Connection: close`` (one request per connection: a second one could not be checked).
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple
from urllib.parse import urlsplit

from ironflow.auth_proxy import policy, tokens

__all__ = [
    "AUTHENTICATE",
    "MalformedHead",
    "ProxyRequest",
    "answer",
    "origin_head",
    "parse_head",
    "proxy_token",
]

_TOKEN_CHARS: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HOST_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,253}")
_CONTROL: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_VERSIONS: Final = ("HTTP/1.1", "HTTP/1.0")
_REASONS: Final = {
    200: "Connection established",
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
#: The challenge of every 407: curl, pip, npm and git answer it with Basic from the proxy URL.
AUTHENTICATE: Final = ("Proxy-Authenticate", 'Basic realm="ironflow egress"')


class MalformedHead(ValueError):
    """A head the proxy answers with 400; the message is safe to send and log."""


class ProxyRequest(NamedTuple):
    """One parsed head. ``target`` is the origin-form target sent upstream (query kept);
    ``path`` is the same without the query: what a policy and a log line may see. A named tuple:
    one is built per connection before its first byte, at a third of a frozen dataclass's cost."""

    method: str
    host: str
    port: int
    target: str = ""
    path: str | None = None
    version: str = "HTTP/1.1"
    headers: tuple[tuple[str, str], ...] = ()
    content_length: int | None = None
    chunked: bool = False
    #: The first ``Proxy-Authorization`` value, picked while the head is read (it carries the token).
    proxy_authorization: str | None = None

    def __repr__(self) -> str:  # never the headers: Proxy-Authorization carries the token
        return f"ProxyRequest(method={self.method!r}, host={self.host!r}, port={self.port!r}, path={self.path!r})"

    @property
    def tunnel(self) -> bool:
        return self.method == "CONNECT"

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((value for key, value in self.headers if key.lower() == lowered), None)


def _authority(text: str) -> tuple[str, int]:
    """``host:port`` of a CONNECT (``[v6]:port``); the port is required."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "[" in host:
        raise MalformedHead("CONNECT target must be host:port")
    number = int(port) if sep and port.isdigit() and len(port) <= 5 else 0
    if not 0 < number < 65536:
        raise MalformedHead("CONNECT target must be host:port")
    return _host(host), number


def _host(host: str) -> str:
    if ":" in host:
        if not re.fullmatch(r"[0-9A-Fa-f:.]{2,45}", host):
            raise MalformedHead("bad host")
        return host.lower()
    if not _HOST_NAME.fullmatch(host):
        raise MalformedHead("bad host")
    return host.lower()


def _absolute(target: str) -> tuple[str, int, str, str]:
    """host, port, origin-form target and path of an ``http://`` absolute-form target."""
    if not target.lower().startswith("http://"):
        if target.lower().startswith("https://"):
            raise MalformedHead("use CONNECT for https:// (this proxy does not terminate TLS)")
        raise MalformedHead("the target must be http://host/path or CONNECT host:port")
    try:
        parts = urlsplit(target)
        port = parts.port or 80
    except ValueError:
        raise MalformedHead("bad URL") from None
    if parts.username is not None or parts.password is not None or not parts.hostname:
        raise MalformedHead("bad URL authority")
    path = parts.path or "/"
    if not path.startswith("/"):
        raise MalformedHead("bad URL path")
    origin = path + (f"?{parts.query}" if parts.query else "")
    return _host(parts.hostname), port, origin, path


def _framing(lengths: set[str], encodings: list[str]) -> tuple[int | None, bool]:
    """Content-Length, chunked: from the values of the head's Content-Length and Transfer-Encoding lines."""
    if encodings and lengths:
        raise MalformedHead("both Content-Length and Transfer-Encoding")
    if encodings:
        if encodings != ["chunked"]:
            raise MalformedHead("only Transfer-Encoding: chunked is relayed")
        return None, True
    if not lengths:
        return None, False
    if len(lengths) != 1 or not next(iter(lengths)).isdigit():
        raise MalformedHead("bad Content-Length")
    return int(next(iter(lengths))), False


def parse_head(head: bytes) -> ProxyRequest:
    """The request in ``head`` (its bytes up to and including the blank line)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise MalformedHead("non-ASCII bytes in the request head") from None
    lines = text.split("\r\n")
    if len(lines) < 3 or lines[-2:] != ["", ""]:
        raise MalformedHead("the head must end with an empty line")
    request_line = lines[0].split(" ")
    if len(request_line) != 3:
        raise MalformedHead("bad request line")
    method, target, version = request_line
    if not _TOKEN_CHARS.fullmatch(method) or version not in _VERSIONS:
        raise MalformedHead("bad request line")
    headers: list[tuple[str, str]] = []
    lengths: set[str] = set()
    encodings: list[str] = []
    authorization: str | None = None
    for line in lines[1:-2]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN_CHARS.fullmatch(name) or _CONTROL.search(value):
            raise MalformedHead("bad header line")
        value = value.strip(" \t")  # no other whitespace is left: _CONTROL refused it
        headers.append((name, value))
        lowered = name.lower()
        if lowered == "content-length":
            lengths.add(value)
        elif lowered == "transfer-encoding":
            encodings.append(value.lower())
        elif lowered == "proxy-authorization" and authorization is None:
            authorization = value
    content_length, chunked = _framing(lengths, encodings)
    if method == "CONNECT":
        host, port = _authority(target)
        return ProxyRequest(
            method, host, port, version=version, headers=tuple(headers), proxy_authorization=authorization
        )
    host, port, origin, path = _absolute(target)
    return ProxyRequest(
        method, host, port, origin, path, version, tuple(headers), content_length, chunked, authorization
    )


def proxy_token(request: ProxyRequest) -> str | None:
    """The ``ifap_`` token of ``Proxy-Authorization``: Bearer, or a Basic password (a proxy URL's
    ``user:TOKEN@``), read as the relay reads ``Authorization``."""
    if request.proxy_authorization is None:
        return None
    bearer, basic = policy.authorization_parts(request.proxy_authorization)
    return bearer or basic or None


def origin_head(request: ProxyRequest) -> bytes:
    """The head sent upstream for a plain-HTTP request (see the module docstring)."""
    named = request.header("connection") or ""
    dropped = tokens.HOP_BY_HOP | {"host"} | {n.strip().lower() for n in named.split(",") if n.strip()}
    host = f"[{request.host}]" if ":" in request.host else request.host
    authority = host if request.port == 80 else f"{host}:{request.port}"
    lines = [f"{request.method} {request.target} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in request.headers if name.lower() not in dropped]
    if request.chunked:
        lines.append("Transfer-Encoding: chunked")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def answer(status: int, body: str = "", *extra: tuple[str, str]) -> bytes:
    """A whole response of the proxy's own: a one-line text body, then the connection closes."""
    data = (body + "\n").encode() if body else b""
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    head += [f"{name}: {value}" for name, value in extra]
    if status != 200:
        head += ["Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(data)}", "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data
