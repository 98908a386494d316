"""Every bad input is one ``error:`` line and exit 2, never a traceback (issue 19 item 11)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.one_line import assert_one_line, invoke

PASSWORD = "s3cret-pw"


@pytest.fixture
def provider_file(tmp_path: Path) -> Path:
    path = tmp_path / "provider.yaml"
    path.write_text("image: busybox\n")
    return path


@pytest.mark.parametrize(
    ("step_yaml", "words"),
    [
        ("prompt: 42\n", "step setting 'prompt' must be text, got 42"),
        ("prompt: hi\nmax_turns: three\n", "step setting 'max_turns' must be a whole number, got 'three'"),
        ("prompt: hi\nmax_turns: true\n", "step setting 'max_turns' must be a whole number, got True"),
    ],
)
def test_a_step_file_setting_of_the_wrong_type_is_named(
    tmp_path: Path, provider_file: Path, step_yaml: str, words: str
) -> None:
    step = tmp_path / "step.yaml"
    step.write_text(step_yaml)
    assert_one_line(*invoke("render", "--provider", str(provider_file), "--step", str(step)), words)


def test_a_prompt_that_is_not_utf8_is_refused(provider_file: Path) -> None:
    """The shell hands undecodable bytes over as surrogates; they cannot reach the step."""
    assert_one_line(*invoke("agent", "--fake-model", "\udcff"), "PROMPT is not valid UTF-8")
    assert_one_line(*invoke("render", "--provider", str(provider_file), "--prompt", "\udcff"), "not valid UTF-8")


def test_an_unparsable_postgres_store_url_is_bad_input_and_keeps_the_password() -> None:
    code, err = invoke("runs", "list", env={"IRONFLOW_STORE": f"postgresql://u:{PASSWORD}@[bad"})
    assert_one_line(code, err, "the PostgreSQL store URL is not valid")
    assert PASSWORD not in err


@pytest.mark.parametrize("command", [["agent", "--fake-model", "hi"], ["exec", "--", "true"]])
def test_an_infinite_timeout_is_refused(command: list[str]) -> None:
    code, err = invoke(command[0], "--timeout", "inf", *command[1:])
    assert_one_line(code, err, "invalid --timeout inf")


def test_an_empty_model_is_bad_input() -> None:
    assert_one_line(*invoke("agent", "--fake-model", "--model", "", "hi"), "--model must name a model")


def test_runs_list_never_creates_the_directory_of_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    code, err = invoke("runs", "list", "--store", f"sqlite:///{missing / 'x.db'}")
    assert_one_line(code, err, "its directory does not exist")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", [["agent", "--fake-model", "hi"], ["exec", "--", "true"]])
@pytest.mark.parametrize(
    ("text", "env", "words"),
    [
        ("relays: [{host: a.example.com, injection: bearer}]\n", {}, "relays[0].credential_env: is required"),
        ("image: x\n", {}, "provider file"),
        (
            "relays: [{host: a.example.com, injection: bearer, credential_env: IFT_NONE}]\n",
            {"IFT_NONE": ""},
            "needs its credential in IFT_NONE",
        ),
    ],
)
def test_a_local_relay_file_that_cannot_work_is_one_line(
    tmp_path: Path, command: list[str], text: str, env: dict[str, str], words: str
) -> None:
    relays = tmp_path / "relays.yaml"
    relays.write_text(text)
    code, err = invoke(command[0], "--provider", str(relays), *command[1:], env=env)
    assert_one_line(code, err, words)


def test_relays_are_refused_by_exec_on_k8s_not_dropped(tmp_path: Path) -> None:
    provider = tmp_path / "k8s.yaml"
    provider.write_text(
        "image: ghcr.io/acme/claude-runner:1\nauth_proxy: http://p:8080\n"
        "relays: [{host: a.example.com, injection: bearer, credential_secret: {secret: s, key: k}}]\n"
    )
    code, err = invoke("exec", "--backend", "k8s", "--provider", str(provider), "--", "true")
    assert_one_line(code, err, "exec pods do not get them yet")


def test_an_egress_policy_without_the_auth_proxy_is_refused_by_exec_on_k8s_not_dropped(tmp_path: Path) -> None:
    provider = tmp_path / "k8s.yaml"
    provider.write_text("image: ghcr.io/acme/claude-runner:1\negress: {allow: [pypi.org]}\n")
    code, err = invoke("exec", "--backend", "k8s", "--provider", str(provider), "--", "true")
    assert_one_line(code, err, "an egress policy on Kubernetes needs auth_proxy(url)")


@pytest.mark.parametrize("argv", [["--isolatoin", "gvisor", "--", "true"], ["--bogus"]])
def test_a_misspelt_exec_option_is_refused_not_run_as_the_command(argv: list[str]) -> None:
    """Before the fix, ``exec --isolatoin gvisor -- true`` ran ``--isolatoin`` in the sandbox (exit 127)."""
    assert_one_line(*invoke("exec", *argv), f"no such option: {argv[0]}")
