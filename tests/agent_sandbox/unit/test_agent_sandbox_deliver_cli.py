"""``ironflow sandbox deliver-token``'s refusals: each bad input is one line and exit 2, before
any cluster or proxy is asked (the delivery itself runs on the real tier)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.fakes.sandbox_cli import run_sandbox

from ironflow.auth_proxy.admin_client import ADMIN_KEY_ENV

PROXY = "http://ironflow-auth-proxy.ironflow.svc:8080"


def provider_file(tmp_path: Path, **extra: object) -> str:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump({"image": "ghcr.io/acme/runner:1", "sandboxed": True, **extra}))
    return str(path)


def refused(*args: str) -> str:
    code, out, err = run_sandbox("deliver-token", *args)
    assert (code, out) == (2, ""), err
    (line,) = err.strip().splitlines()
    return line


def test_without_a_provider_file_it_names_the_option() -> None:
    assert refused("eph") == (
        "error: deliver-token needs --provider FILE: the provider file with the auth_proxy the pattern waits on"
    )


def test_a_provider_without_auth_proxy_has_nothing_to_deliver(tmp_path: Path) -> None:
    line = refused("eph", "--provider", provider_file(tmp_path))
    assert line.endswith("has no auth_proxy: its patterns start the agent at once, nothing waits for a token")


def test_without_the_admin_key_it_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADMIN_KEY_ENV, raising=False)
    assert refused("eph", "--provider", provider_file(tmp_path, auth_proxy=PROXY)) == (
        f"error: auth_proxy requires {ADMIN_KEY_ENV}"
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["Bad_Name"], "error: invalid sandbox name 'Bad_Name'"),
        (["eph", "-n", "Bad_NS"], "error: invalid namespace"),
        (["eph", "--timeout", "soon"], "error: --timeout: invalid duration 'soon'"),
    ],
)
def test_bad_names_and_durations_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    monkeypatch.setenv(ADMIN_KEY_ENV, "k" * 40)
    assert refused(*args, "--provider", provider_file(tmp_path, auth_proxy=PROXY)).startswith(expected)
