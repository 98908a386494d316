"""The token file ``ironflow sandbox serve`` shares with its clients (issue 34, L1): a second
serve, whether it fails to bind or serves another address, never locks the first one's
clients out; a new token replaces only a dead server's."""

from __future__ import annotations

import stat
from pathlib import Path
from urllib.parse import urlsplit

from tests.sessions.integration.serving import Served, cli_env, ironflow, start_serve


def _stopped(server: Served) -> str:
    """Stop ``server``; its stderr."""
    assert server.stop() == 0
    _, err = server.proc.communicate()
    return err


def _lists(url: str, env: dict[str, str]) -> bool:
    done = ironflow("sandbox", "ls", "--server", url, env=env)
    return done.returncode == 0 and "refused" not in done.stderr


def test_a_second_serve_never_replaces_a_live_servers_token(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = cli_env(XDG_RUNTIME_DIR=str(runtime))
    token_file = runtime / "ironflow" / "sandbox-token"
    first = start_serve(env)
    try:
        token = token_file.read_text()
        port = str(urlsplit(first.url).port)
        taken = ironflow("sandbox", "serve", "--port", port, env=env)  # the same address: it cannot bind
        assert taken.returncode == 2, taken.stderr
        [line] = taken.stderr.strip().splitlines()
        assert line.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
        assert token_file.read_text() == token
        assert _lists(first.url, env)

        other = start_serve(env)  # another address: it serves with the live server's token
        try:
            assert token_file.read_text() == token
            assert _lists(first.url, env)
            assert _lists(other.url, env)
        finally:
            err = _stopped(other)
        assert (
            err.splitlines()[0]
            == f"token: another running serve's, read from {token_file} (mode 0600; clients read it there)"
        )
        assert token.strip() not in err
        assert _lists(first.url, env), "the first server outlives the second"
    finally:
        err = _stopped(first)
    assert err.splitlines()[0] == f"token: written to {token_file} (mode 0600; clients read it there)"

    alone = start_serve(env)  # no live server holds the file: a new token
    try:
        assert token_file.read_text() != token
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert _lists(alone.url, env)
    finally:
        _stopped(alone)
