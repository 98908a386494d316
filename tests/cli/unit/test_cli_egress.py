"""``ironflow egress check``: a line per URL naming the deciding rule or reason; exit 0 all allowed, 1 any denied,
2 bad input; and the options' policy builder it shares with the commands that take a policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.one_line import assert_one_line, invoke
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.egress import InvalidEgressPolicy, Rule, options

POLICY = """
allow:
  - "*"
  - host: pypi.org
    ports: [80]
    methods: [GET]
    path_prefix: /simple/
deny: ["evil.example.com"]
"""


def _check(*args: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(app, ["egress", "check", *args])
    return result.exit_code, result.stdout.splitlines(), result.stderr


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "egress.yaml"
    path.write_text(POLICY)
    return path


def test_every_url_gets_one_line_with_the_rule_and_all_allowed_is_exit_0(policy_file: Path) -> None:
    code, lines, err = _check("--policy", str(policy_file), "https://files.pythonhosted.org/x", "pypi.org:443")
    assert (code, err) == (0, "")
    assert lines == [
        "allowed https://files.pythonhosted.org/x — allow *:443,80",
        "allowed pypi.org:443 — allow *:443,80",
    ]


def test_the_issues_addresses_are_denied_under_star_and_any_denial_is_exit_1(policy_file: Path) -> None:
    urls = ("http://2130706433/", "http://0x7f.1/", "http://[::ffff:127.0.0.1]/", "169.254.169.254:80", "127.0.0.1:22")
    code, lines, _ = _check("--policy", str(policy_file), *urls)
    assert code == 1
    assert lines == [
        "denied http://2130706433/ — 127.0.0.1 is loopback: only a rule naming it opens it",
        "denied http://0x7f.1/ — 127.0.0.1 is loopback: only a rule naming it opens it",
        "denied http://[::ffff:127.0.0.1]/ — 127.0.0.1 is loopback: only a rule naming it opens it",
        "denied 169.254.169.254:80 — 169.254.169.254 is link-local (metadata): only a rule naming it opens it",
        "denied 127.0.0.1:22 — 127.0.0.1 is loopback: only a rule naming it opens it",
    ]


def test_a_deny_rule_is_named(policy_file: Path) -> None:
    code, lines, _ = _check("--policy", str(policy_file), "https://evil.example.com/")
    assert code == 1
    assert lines == ["denied https://evil.example.com/ — denied by deny evil.example.com:443,80"]


def test_options_build_the_policy_without_a_file() -> None:
    code, lines, _ = _check("--egress-profile", "pypi", "--allow-host", "*.github.com:443", "https://pypi.org/simple/")
    assert (code, lines) == (0, ["allowed https://pypi.org/simple/ — allow pypi.org:443"])
    code, lines, _ = _check("--egress-profile", "pypi", "https://github.com/", "https://api.github.com/")
    assert code == 1
    assert lines == [
        "denied https://github.com/ — no rule allows github.com:443",
        "denied https://api.github.com/ — no rule allows api.github.com:443",
    ]


def test_no_policy_denies_everything() -> None:
    code, lines, _ = _check("https://pypi.org/")
    assert (code, lines) == (1, ["denied https://pypi.org/ — no rule allows pypi.org:443"])


def test_plain_http_checks_method_and_path(tmp_path: Path) -> None:
    assert _check("--allow-host", "x.example.com:8080", "http://x.example.com:8080/a")[0] == 0
    policy = tmp_path / "p.yaml"
    policy.write_text("allow: [{host: pypi.org, ports: [80, 443], methods: [GET], path_prefix: /simple/}]")
    assert _check("--policy", str(policy), "http://pypi.org/simple/requests/")[0] == 0
    assert _check("--policy", str(policy), "--method", "POST", "http://pypi.org/simple/requests/")[0] == 1
    code, lines, _ = _check("--policy", str(policy), "https://pypi.org/simple/requests/")
    assert code == 1
    assert "scoped by method or path, which a CONNECT tunnel does not show" in lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("https://pypi.org:99999/",), "invalid URL 'https://pypi.org:99999/'"),
        (("ftp://pypi.org/",), "the scheme must be http or https"),
        (("pypi.org",), "invalid destination 'pypi.org': expected https://HOST/…, http://HOST/… or HOST:PORT"),
        (("https://user:pw@pypi.org/",), "invalid URL: a credential does not belong in it"),
        (("--egress-profile", "pipy-x", "https://pypi.org/"), "unknown egress profile 'pipy-x'"),
        (("--allow-host", "pypi.org:x", "https://pypi.org/"), "--allow-host: invalid port in 'pypi.org:x'"),
        (("--policy", "/nonexistent/egress.yaml", "https://pypi.org/"), "cannot read egress file"),
        ((), "missing argument 'URL'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], words: str) -> None:
    assert_one_line(*invoke("egress", "check", *args), words)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("allow: [", "is not valid YAML"),
        ("alow: []", "unknown egress key 'alow'"),
        ("allow: [{host: 'a.com', ports: [0]}]", "egress allow[0]: invalid ports [0] for a.com"),
        ("- a.com", "an egress policy is a mapping of allow, deny, profiles, not list"),
    ],
)
def test_a_bad_policy_file_is_one_line_naming_the_file(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "egress.yaml"
    path.write_text(text)
    code, err = invoke("egress", "check", "--policy", str(path), "https://pypi.org/")
    assert_one_line(code, err, words)
    assert "egress.yaml" in err


def test_policy_from_options_merges_files_profiles_and_hosts_in_that_order() -> None:
    found = options.policy_from_options(
        ["a.example.com:443"], ["npm"], [("egress file 'f'", "allow: [b.example.com]\ndeny: [c.example.com]")]
    )
    assert [r.host for r in found.allow] == ["b.example.com", "registry.npmjs.org", "a.example.com"]
    assert found.deny == (Rule("c.example.com"),)


def test_policy_from_options_takes_a_files_own_profiles() -> None:
    mine = options.policy_from_options(["mirror.internal:443"])
    assert options.policy_from_options(profiles=["mine"], extra_profiles={"mine": mine}) == mine
    with pytest.raises(InvalidEgressPolicy, match="egress file 'f': egress allow\\[0\\]"):
        options.policy_from_options(files_contents=[("egress file 'f'", "allow: [3]")])


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://pypi.org/simple/", options.Target("pypi.org", 443)),
        ("https://PyPI.org:8443", options.Target("pypi.org", 8443)),
        ("http://pypi.org/simple/?q=1", options.Target("pypi.org", 80, "GET", "/simple/?q=1")),
        ("http://[::1]:8080", options.Target("::1", 8080, "GET", "/")),
        ("[::1]:8443", options.Target("::1", 8443)),
        ("2130706433:80", options.Target("2130706433", 80)),
    ],
)
def test_a_url_is_the_destination_the_proxy_sees(url: str, expected: options.Target) -> None:
    assert options.target(url) == expected
