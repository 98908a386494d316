"""``exec``, ``agent`` and ``sandbox open`` egress options and a local provider file's ``egress:``:
one policy, and every bad input one line with exit 2 before any sandbox starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.cli.one_line import assert_one_line, invoke

from ironflow import egress
from ironflow.cli import egress_options

LOCAL_FILE = """
egress_profiles:
  internal: {allow: ["pkgs.internal.example:443"]}
egress:
  profiles: [internal]
"""


def test_a_local_provider_files_egress_comes_first_and_its_profiles_serve_the_options(tmp_path: Path) -> None:
    path = tmp_path / "local.yaml"
    path.write_text(LOCAL_FILE)
    found = egress_options.local_file(path)
    assert found.relays == ()
    policy = egress_options.command_policy(["pypi.org"], ["internal"], None, found)
    assert policy is not None
    assert egress.decide(policy, "pkgs.internal.example", 443).allowed
    assert egress.decide(policy, "pypi.org", 443).allowed
    assert not egress.decide(policy, "example.org", 443).allowed
    assert egress_options.command_policy(None, None, None, found) == found.egress


def test_nothing_given_is_no_policy() -> None:
    assert egress_options.command_policy(None, None, None) is None
    assert egress_options.command_policy([], [], []) is None


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["exec", "--allow-host", "bad host!", "--", "true"], "--allow-host: invalid egress host"),
        (["exec", "--egress-profile", "nope", "--", "true"], "unknown egress profile 'nope'"),
        (["exec", "--egress", "/nonexistent/egress.yaml", "--", "true"], "cannot read egress file"),
        (["exec", "--backend", "k8s", "--allow-host", "pypi.org", "--", "true"], "--backend k8s needs --provider"),
        (["agent", "--backend", "agent-sandbox", "--allow-host", "pypi.org", "hi"], "agent-sandbox needs --provider"),
        (["agent", "--fake-model", "--allow-host", "bad host!", "hi"], "--allow-host: invalid egress host"),
    ],
)
def test_bad_egress_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    code, err = invoke(*args)
    assert_one_line(code, err, words)


def test_a_bad_egress_key_in_the_local_provider_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "local.yaml"
    path.write_text("egress:\n  allow: [5]\n")
    code, err = invoke("exec", "--provider", str(path), "--", "true")
    assert_one_line(code, err, "provider file")
    path.write_text("egres: {}\n")
    code, err = invoke("exec", "--provider", str(path), "--", "true")
    assert_one_line(code, err, "did you mean 'egress'")


def test_bad_egress_input_on_exec_k8s_is_one_line_before_any_pod(tmp_path: Path) -> None:
    path = tmp_path / "k8s.yaml"
    path.write_text("image: ghcr.io/acme/claude-runner:1\nauth_proxy: http://p:8080\n")
    for args, words in (
        (["--allow-host", "bad host!"], "--allow-host: invalid egress host"),
        (["--egress-profile", "nope"], "unknown egress profile 'nope'"),
    ):
        code, err = invoke("exec", "--backend", "k8s", "--provider", str(path), *args, "--", "true")
        assert_one_line(code, err, words)


@pytest.mark.parametrize("backend", ["k8s", "agent-sandbox"])
def test_sandbox_open_passes_egress_to_a_cluster_session_which_refuses_it_without_a_proxy(
    tmp_path: Path, backend: str
) -> None:
    """The policy reaches the session (refused by it for want of a proxy, before any cluster is reached)."""
    path = tmp_path / "k8s.yaml"
    pod = "image: ghcr.io/acme/claude-runner:1\nsandboxed: true\n"
    path.write_text(pod if backend == "k8s" else "pod:\n" + "".join(f"  {line}\n" for line in pod.splitlines()))
    code, err = invoke("sandbox", "open", "--backend", backend, "--provider", str(path), "--allow-host", "pypi.org")
    assert_one_line(code, err, "egress in a Kubernetes session needs auth_proxy")


SANDBOX_FILE = """
pod:
  image: ghcr.io/acme/claude-runner:1
  sandboxed: true
  auth_proxy: http://auth-proxy.ironflow:8080
  egress_profiles:
    internal: {allow: ["pkgs.internal.example:443"]}
"""


def test_agent_sandbox_egress_options_are_checked_against_the_pod_settings_before_any_claim(tmp_path: Path) -> None:
    """``--egress-profile`` may name the pod settings' own profiles; a policy the template's pods have
    no way to use (the pod's ``egress:`` opens nothing, so its NetworkPolicy never opens the proxy)
    is one line, as is an unknown profile."""
    path = tmp_path / "sandbox.yaml"
    path.write_text(SANDBOX_FILE)
    agent = ("agent", "--backend", "agent-sandbox", "--provider", str(path))
    for args, words in (
        (["--egress-profile", "nope"], "unknown egress profile 'nope'"),
        (["--egress-profile", "internal"], "adds to the pod settings' egress:, which opens nothing"),
        (["--allow-host", "pypi.org"], "run 'ironflow sandbox apply-template'"),
    ):
        code, err = invoke(*agent, *args, "hi")
        assert_one_line(code, err, words)
