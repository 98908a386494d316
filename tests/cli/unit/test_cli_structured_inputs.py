"""Hostile structured files and URLs (issue 34, L2): a 5,000-deep list in any file the CLI reads,
bytes that are not UTF-8, numbers past the interpreter's digit limit, a cyclic YAML alias and a
malformed server URL are each one ``error:`` line and exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ironflow import errors, settings_file
from ironflow.cli.app import app

DEEP = 5000
DEEP_YAML = "image: " + "[" * DEEP + "]" * DEEP + "\n"
DEEP_JSON = "[" * DEEP + "]" * DEEP
TOO_DEEP = "nested deeper than 64 levels"
PASSWORD = "s3cret-pw"


def _error_line(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    err = result.stderr
    assert result.exit_code == 2, (result.exit_code, err, result.exception)
    assert "Traceback" not in err
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    return err.strip()


def _file(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (DEEP_YAML, TOO_DEEP),
        ("image: &x [*x]\n", TOO_DEEP),  # a list that holds itself
        (b"image: busybox\nnamespace: \xff\xfe\n", "is not UTF-8 text (byte 26)"),
        ("image: " + "1" * 5000 + "\n", "Exceeds the limit (4300 digits)"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["render", "--prompt", "hi", "--provider"],
        ["agent", "--backend", "k8s", "hi", "--provider"],
        ["sandbox", "ls", "--provider"],
        ["sandbox", "ls", "--backend", "agent-sandbox", "--provider"],
    ],
)
def test_a_hostile_provider_file_is_one_line(
    tmp_path: Path, command: list[str], content: str | bytes, words: str
) -> None:
    err = _error_line(*command, _file(tmp_path, "p.yaml", content))
    assert "provider file" in err, err
    assert words in err, err


def test_a_hostile_step_file_is_one_line(tmp_path: Path) -> None:
    provider = _file(tmp_path, "p.yaml", "image: busybox\n")
    for content, words in ((DEEP_YAML.replace("image", "prompt"), TOO_DEEP), (b"prompt: \xff\n", "not UTF-8")):
        err = _error_line("render", "--provider", provider, "--step", _file(tmp_path, "s.yaml", content))
        assert "step file" in err, err
        assert words in err, err


def test_a_hostile_input_is_one_line(tmp_path: Path) -> None:
    for value, words in (
        (DEEP_JSON, TOO_DEEP),
        ("@" + _file(tmp_path, "deep.json", DEEP_JSON), TOO_DEEP),
        ("@" + _file(tmp_path, "bytes.json", b'"\xff"'), "is not UTF-8 text"),
        ("1" * 5000, "Exceeds the limit"),
    ):
        err = _error_line("run", "some.module:flow", "--input", value)
        assert err.startswith("error: --input"), err
        assert words in err, err


def test_a_hostile_fake_model_script_is_one_line(tmp_path: Path) -> None:
    script = _file(tmp_path, "script.yaml", "turns: " + "[" * DEEP + "]" * DEEP + "\n")
    err = _error_line("agent", "--fake-model", "--fake-model-script", script, "hi")
    assert "fake-anthropic script" in err, err
    assert TOO_DEEP in err, err


@pytest.mark.parametrize(
    "command",
    [
        ["check", "--no-exec", "--kubeconfig"],
        ["reap", "--namespace", "agents", "--kubeconfig"],
        ["agent", "--backend", "k8s", "hi", "--provider"],  # the provider file names the kubeconfig
    ],
)
def test_a_hostile_kubeconfig_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """The kubeconfig goes through the one bounded decoder before the loader's own ``yaml.safe_load``
    (issue 33: "maximum recursion depth exceeded" was its line)."""
    kubeconfig = _file(tmp_path, "kc.yaml", DEEP_YAML.replace("image", "clusters"))
    target = kubeconfig
    if "--provider" in command:
        target = _file(tmp_path, "p.yaml", f"image: busybox\ncluster: {{kubeconfig: {kubeconfig}}}\n")
    err = _error_line(*command, target)
    assert f"failed to create K8s client from kubeconfig file {kubeconfig}: the kubeconfig" in err, err
    assert TOO_DEEP in err, err


def test_a_hostile_inline_kubeconfig_is_one_line(tmp_path: Path) -> None:
    inline = json.dumps(DEEP_YAML.replace("image", "clusters"))
    provider = _file(tmp_path, "p.yaml", f"image: busybox\ncluster: {{kubeconfig_inline: {inline}}}\n")
    err = _error_line("agent", "--backend", "k8s", "hi", "--provider", provider)
    assert "failed to create K8s client from inline kubeconfig: the kubeconfig is not valid YAML" in err, err
    assert TOO_DEEP in err, err


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://[zz]:9", "does not appear to be an IPv4 or IPv6 address"),
        ("http://host:99999", "Port out of range"),
        ("http://host:port", "Port could not be cast"),
        ("http://a b:9", "names no host"),
        ("http://127.0.0.1:0", "port 0"),
        (f"http://u:{PASSWORD}@127.0.0.1:9", "a credential does not belong in it"),
    ],
)
def test_a_malformed_server_url_is_one_line(url: str, words: str) -> None:
    env = {"IRONFLOW_SANDBOX_TOKEN": "a-token-long-enough-0123456789"}
    err = _error_line("sandbox", "ls", "--server", url, env=env)
    assert err.startswith("error: invalid sandbox server"), err
    assert words in err, err
    assert PASSWORD not in err
    err = _error_line("auth-proxy", "revoke", "--url", url, "0" * 64, env={"IRONFLOW_AUTH_PROXY_ADMIN_KEY": "k" * 32})
    assert err.startswith("error: invalid auth proxy URL"), err
    assert words in err, err
    assert PASSWORD not in err


def test_manifests_refuse_a_malformed_proxy_url() -> None:
    assert "is not a URL (Invalid IPv6 URL)" in _error_line("manifests", "--auth-proxy", "http://[::1")


def test_a_file_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (settings_file.MAX_FILE_BYTES + 1))
    with pytest.raises(errors.ConfigError, match=r"^provider file '.*big\.yaml' is larger than 8 MiB$"):
        settings_file.read(path, what="provider file")


def test_the_depth_bound_is_inclusive() -> None:
    fits = "[" * (settings_file.MAX_DEPTH - 1) + "]" * (settings_file.MAX_DEPTH - 1)
    assert settings_file.decode("a: " + fits, source="f.yaml") is not None
    assert settings_file.decode("[" + fits + "]", source="f.json", as_json=True) is not None
    with pytest.raises(errors.ConfigError, match=TOO_DEEP):
        settings_file.decode("[[" + fits + "]]", source="f.json", as_json=True)
