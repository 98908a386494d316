"""``ironflow ui`` as a command: bad input exits 2 with one line; a token guards its pages; SIGTERM stops it."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from tests.ui.integration.ui_process import running_ui
from typer.testing import CliRunner

from ironflow.cli.app import app

TOKEN = "a-long-admin-token-for-the-cli-test-42"


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'engine.db'}"
    assert cli("runs", "list", "--store", url)[0] == 2  # not made by a reader
    (tmp_path / "engine.db").touch()
    return url


def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 - a loopback http URL the UI printed
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the same
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--host", "0.0.0.0"],
            {},
            "error: --host 0.0.0.0 is not a loopback address: give an admin token with "
            "--token-file FILE or $IRONFLOW_UI_TOKEN",
        ),
        (
            ["--host", "192.0.2.1"],
            {"IRONFLOW_UI_TOKEN": "short"},
            "error: the admin token in $IRONFLOW_UI_TOKEN is shorter than 16 characters; use a long random one",
        ),
        (
            ["--token-file", "missing.txt"],
            {},
            "error: cannot read --token-file 'missing.txt': No such file or directory",
        ),
        (["--port", "http"], {}, "error: invalid --port 'http': use a port number from 0 (any free port) to 65535"),
        (["--store", "typo.db"], {}, "error: no SQLite store at 'typo.db': its file does not exist"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    store: str, args: list[str], env: dict[str, str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IRONFLOW_UI_TOKEN", raising=False)
    if "--store" not in args:
        args = [*args, "--store", store]
    code, out, err = cli("ui", *args, env=env)
    assert (code, out) == (2, "")
    assert err.startswith(message)
    assert err.count("\n") == 1
    assert "short" not in err.removeprefix(message)


def test_an_address_in_use_exits_2_naming_it(store: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = cli("ui", "--store", store, "--port", str(port))
    assert code == 2
    assert (
        err
        == f"error: cannot serve the UI on 127.0.0.1:{port}: Address already in use; choose another port or address\n"
    )


def test_with_a_token_file_the_pages_need_the_token_and_sigterm_stops_the_ui(store: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if k != "IRONFLOW_UI_TOKEN"}
    with running_ui("--store", store, "--token-file", str(token_file), env=env) as url:
        status, page = get(f"{url}/")
        assert status == 401
        assert TOKEN not in page
        assert get(f"{url}/", "wrong-token-of-the-same-size-xx")[0] == 401
        status, page = get(f"{url}/", TOKEN)
        assert status == 200
        assert "No runs match." in page
