"""The pure parts of ``sandbox serve`` and its clients: the router headers, the open request, the
server URL and token look-up, and the CLI's ``ID:PATH`` form."""

from __future__ import annotations

from pathlib import Path

import pytest

from ironflow import errors
from ironflow.cli.sandbox_sessions import parse_remote
from ironflow.sandbox_router import protocol
from ironflow.sandbox_router.process import is_loopback
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions, remote
from ironflow.sessions.routes import RouteTarget


def test_the_router_target_defaults_and_caps_the_timeout() -> None:
    assert protocol.target({"X-Sandbox-ID": "sbx-0123456789abcdef"}) == (RouteTarget("sbx-0123456789abcdef"), 180.0)
    assert protocol.target({"X-Sandbox-ID": "a", "X-Sandbox-Timeout": "2.5"}) == (RouteTarget("a"), 2.5)
    assert protocol.target({"X-Sandbox-ID": "a", "X-Sandbox-Timeout": "1e9"}) == (RouteTarget("a"), 180.0)
    assert protocol.target({"X-Sandbox-ID": "a", "X-Sandbox-Timeout": "nan"}) == (RouteTarget("a"), 180.0)
    named = {"X-Sandbox-ID": "a", "X-Sandbox-Namespace": "team", "X-Sandbox-Port": "9000"}
    assert protocol.target(named)[0] == RouteTarget("a", "team", 9000)


@pytest.mark.parametrize(
    ("headers", "status", "text"),
    [
        ({}, 400, "X-Sandbox-ID header is required."),
        ({"X-Sandbox-ID": "Not_A_Label"}, 400, "Invalid sandbox ID format."),
        ({"X-Sandbox-ID": "a", "X-Sandbox-Namespace": "-x"}, 400, "Invalid namespace format."),
        ({"X-Sandbox-ID": "a", "X-Sandbox-Port": "65536"}, 400, "Invalid port format."),
        ({"X-Sandbox-ID": "a", "X-Sandbox-Pod-IP": "pod.example"}, 400, "Invalid target IP address format."),
        ({"X-Sandbox-ID": "a", "X-Sandbox-Pod-IP": "127.0.0.1"}, 400, "Invalid target IP address."),
        ({"X-Sandbox-ID": "a", "X-Sandbox-Pod-IP": "169.254.169.254"}, 400, "Invalid target IP address."),
        ({"X-Sandbox-ID": "a", "X-Sandbox-Pod-IP": "[::]"}, 400, "Invalid target IP address."),
    ],
)
def test_bad_router_headers_get_upstreams_answers(headers: dict[str, str], status: int, text: str) -> None:
    with pytest.raises(protocol.Refused) as refused:
        protocol.target(headers, pod_ip=True)
    assert (refused.value.status, refused.value.detail) == (status, text)


def test_the_pod_ip_hint_is_read_only_where_it_is_checked() -> None:
    hinted = {"X-Sandbox-ID": "a", "X-Sandbox-Pod-IP": "10.244.0.7"}
    assert protocol.target(hinted, pod_ip=True)[0].pod_ip == "10.244.0.7"
    assert protocol.target(hinted)[0].pod_ip is None
    assert protocol.target({"X-Sandbox-ID": "a", "X-Sandbox-Pod-IP": "127.0.0.1"})[0].pod_ip is None


def test_open_options_fill_the_defaults() -> None:
    assert OpenOptions.from_json({}) == OpenOptions(ttl=3600.0, idle_timeout=None, labels={}, run_id=None, env={})
    assert OpenOptions.from_json({"ttl": "2h", "idle_timeout": 30}).ttl == 7200.0
    with pytest.raises(errors.ConfigError, match="ttl must be a positive number"):
        OpenOptions.from_json({"ttl": float("inf")})


def test_the_server_comes_from_the_argument_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(remote.SERVER_ENV, raising=False)
    with pytest.raises(errors.ConfigError, match="no sandbox server"):
        remote.resolve_server(None)
    monkeypatch.setenv(remote.SERVER_ENV, "http://127.0.0.1:8377/")
    assert remote.resolve_server(None) == "http://127.0.0.1:8377"
    assert remote.resolve_server("https://box.example:443") == "https://box.example:443"
    for bad in ("127.0.0.1:8377", "http://", "http://h:1/path", "unix:///tmp/s"):
        with pytest.raises(errors.ConfigError, match="invalid sandbox server"):
            remote.resolve_server(bad)


def test_the_token_comes_from_the_argument_the_environment_then_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv(remote.TOKEN_ENV, raising=False)
    assert remote.token_file() == tmp_path / "ironflow" / "sandbox-token"
    with pytest.raises(errors.ConfigError, match="no sandbox server token") as caught:
        remote.resolve_token()
    assert str(tmp_path) in caught.value.message
    remote.token_file().parent.mkdir()
    remote.token_file().write_text("from-the-file\n")
    assert remote.resolve_token().reveal() == "from-the-file"
    monkeypatch.setenv(remote.TOKEN_ENV, "from-the-env")
    assert remote.resolve_token().reveal() == "from-the-env"
    assert remote.resolve_token(Secret("given")).reveal() == "given"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert remote.token_file() == Path.home() / ".cache" / "ironflow" / "sandbox-token"


def test_remote_paths_and_loopback_hosts() -> None:
    assert parse_remote("sbx-0123456789abcdef:dir/f") == ("sbx-0123456789abcdef", "dir/f")
    assert parse_remote("sbx-0123456789abcdef:") == ("sbx-0123456789abcdef", ".")
    assert parse_remote("./sbx-0123456789abcdef:x") is None
    assert parse_remote("C:/file") is None
    assert parse_remote("plain") is None
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.0.0.1", "box")] == [
        True, True, True, False, False, False,
    ]  # fmt: skip
