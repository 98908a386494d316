"""The session runtime's command line, its listening socket, its commands' isolation and its hand-out line.

For ``server.py``'s ``main`` only. Standard library only, nothing of ironflow, like its
siblings, and a file apart: a Kubernetes session's pod runs the server's handler with
``pod_exec.py`` and never loads it. The command line is read here, not by argparse (whose
import, with gettext's and locale's, is a slice of every session's cold start); a bad option
exits 2 with a usage line, as argparse's would. The token comes from its file (deleted once
read) or its fd: there a JSON line when a pre-warmed runtime is handed out (the token, the
session's env and idle timeout), else the bare token.
"""

from __future__ import annotations

import _socket
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling files, when imported by the package
from lite import loads, suppress  # type: ignore[import-not-found]

TYPE_CHECKING = False  # not typing's: its import is a slice of every session's cold start
if TYPE_CHECKING:
    import types
    from typing import Any, NoReturn

__all__ = ["isolate", "listener", "open_traverse", "parse_args", "read_token"]

_OPTIONS: dict[str, tuple[Any, Any]] = {
    "unix": (str, None),
    "port": (int, None),
    "listen_fd": (int, None),
    "host": (str, "0.0.0.0"),
    "token_fd": (int, 0),
    "token_file": (str, None),
    "token_fifo": (str, None),  # listen first, take tokens by this FIFO (delivery.py): a pod's main process
    "workspace": (str, "."),
    "max_upload_bytes": (int, 1 << 30),
    "max_output_bytes": (int, 16 << 20),
    "idle_timeout": (float, 0.0),
    "isolate_commands": (None, False),  # a local session: see confine.py
    "runtime_uid": (int, None),  # with it: isolated by uid, not by a pid namespace
    "commands_uid": (int, None),
    "commands_share_uid": (None, False),  # a Docker session: no namespace, no uid apart (see confine.py)
    "prewarm": (None, False),  # say so once set up, then wait for the hand-out line on the token fd
    "traverse": (str, None),  # a 0700 home holding the interpreter, given o+x as root first: see open_traverse
}
_Namespace: Any = type(sys.implementation)  # types.SimpleNamespace, without the import
_USAGE = "usage: server.py (--unix PATH | --port N | --listen-fd N) [--workspace DIR] [--isolate-commands] ..."


def _usage_error(message: str) -> NoReturn:
    print(f"{_USAGE}\nserver.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: list[str]) -> types.SimpleNamespace:
    """The options of ``argv`` (``--name VALUE`` or ``--name=VALUE``); a bad one exits 2 with usage."""
    values = {name: default for name, (_, default) in _OPTIONS.items()}
    words = iter(argv)
    for word in words:
        name, equals, given = word.partition("=")
        key = name[2:].replace("-", "_")
        if not name.startswith("--") or key not in _OPTIONS:
            _usage_error(f"unrecognized arguments: {word}")
        kind = _OPTIONS[key][0]
        if kind is None:
            if equals:
                _usage_error(f"argument {name}: ignored explicit argument {given!r}")
            values[key] = True
            continue
        text = given if equals else next(words, None)
        if text is None:
            _usage_error(f"argument {name}: expected one argument")
        try:
            values[key] = kind(text)
        except ValueError:
            _usage_error(f"argument {name}: invalid {kind.__name__} value: {text!r}")
    if sum(values[key] is not None for key in ("unix", "port", "listen_fd")) != 1:
        _usage_error("exactly one of the arguments --unix --port --listen-fd is required")
    apart = values["runtime_uid"] is not None or values["commands_uid"] is not None or values["commands_share_uid"]
    if apart and not values["isolate_commands"]:
        _usage_error("--runtime-uid, --commands-uid and --commands-share-uid go with --isolate-commands")
    return _Namespace(env={}, expires_at=None, **values)  # type: ignore[no-any-return]


def open_traverse(args: types.SimpleNamespace) -> None:
    """With ``--traverse DIR``, ``DIR`` given o+x (gVisor's root, in the sandbox's own view: a
    root-owned 0700 home that holds the interpreter, which the runtime's later imports and its
    commands must pass once it dropped). The spec runs the runtime straight, no setup shell before it."""
    if args.traverse is None:
        return
    try:
        os.chmod(args.traverse, os.stat(args.traverse).st_mode & 0o7777 | 0o001)
    except OSError as exc:
        raise SystemExit(f"ironflow-runtime: cannot open {args.traverse} for traversal: {exc.strerror}") from None


def listener(args: types.SimpleNamespace) -> _socket.socket:
    """The socket the command line names: an inherited fd, a unix path (0600), or a TCP port.

    Called first, with no other thread: a unix socket is made 0600 by the umask at its bind (no
    moment open to others, and no chmod, which gVisor refuses on a socket it makes on the host)."""
    if args.listen_fd is not None:
        return _socket.socket(fileno=args.listen_fd)
    if args.unix:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        with suppress(FileNotFoundError):
            os.unlink(args.unix)
        umask = os.umask(0o177)
        try:
            sock.bind(args.unix)
        finally:
            os.umask(umask)
    else:
        sock = __import__("socket").create_server((args.host, args.port), reuse_port=False)  # a pod's only
    sock.listen(64)
    return sock


def isolate(args: types.SimpleNamespace, sock: _socket.socket | None) -> Any:
    """With ``--isolate-commands``, the commands kept away from the runtime (the sibling ``confine.py``)
    and what starts one from then on; else None. A runtime that cannot exits (fail closed), with
    ``sock`` (bound already, or None) closed and its unix path removed where it still may."""
    if not args.isolate_commands:
        return None
    try:
        return __import__("confine").isolate_commands(
            args.runtime_uid, args.commands_uid, shared_uid=args.commands_share_uid
        )
    except OSError as exc:
        if sock is not None:
            sock.close()
            if args.unix:
                with suppress(OSError):
                    os.unlink(args.unix)
        raise SystemExit(f"ironflow-runtime: cannot keep commands away from the runtime: {exc}") from None


def read_token(args: types.SimpleNamespace) -> bytes:
    """The token, from its file or its fd; on the fd, a JSON line (a session handed out,
    :func:`_hand_out`) or the bare token."""
    if args.token_file:
        with open(args.token_file, "rb") as f:
            token = f.read().strip()
        os.unlink(args.token_file)
    else:
        with os.fdopen(args.token_fd, "rb") as f:
            token = f.readline().strip()
        if token.startswith(b"{"):  # never a bare token: those are urlsafe base64
            token = _hand_out(args, token)
    if not token:
        raise SystemExit("ironflow-runtime: no token")
    return token


def _hand_out(args: types.SimpleNamespace, line: bytes) -> bytes:
    """What a session gets when it is handed out, on one line: ``{"token": ..., "env": {...},
    "idle_timeout": ..., "expires_at": ...}``. A pre-warmed runtime waits for it: until then it has no token and its
    commands' environment holds nothing of the session's (an egress token goes in here)."""
    try:
        doc = loads(line)
        token, env, idle, ends = doc["token"], doc.get("env") or {}, doc.get("idle_timeout"), doc.get("expires_at")
        if not isinstance(token, str) or not all(isinstance(v, str) for v in (*env, *env.values())):
            raise TypeError("token and env must be strings")
        args.env = env
        if idle is not None:
            args.idle_timeout = float(idle)
        if ends is not None:  # a session that may outlive its server ends itself at its TTL
            args.expires_at = float(ends)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SystemExit(f"ironflow-runtime: a bad hand-out line: {type(exc).__name__}") from None
    return token.encode()
