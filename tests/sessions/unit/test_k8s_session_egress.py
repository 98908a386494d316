"""A Kubernetes session's egress (pure parts): the policy it takes at open, what its pod's manifest
names (the file of variables, never a token) and the exec that writes that file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.agent_sandbox import step_render as sandbox_steps
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.egress import options
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions import egress_delivery, session_pod
from ironflow.sandbox_runtime import SESSION_ENV
from ironflow.sessions import OpenOptions

POD = K8sEphemeralProvider.sandboxed("ghcr.io/acme/claude-runner:1").namespace("agents")
PROXIED = POD.auth_proxy("http://auth-proxy.ironflow:8080")
PYPI = options.policy_from_options(["pypi.org"])


def test_the_policy_is_the_providers_with_the_sessions_added() -> None:
    github = options.policy_from_options(["github.com"])
    found = egress_delivery.policy_for(PROXIED.egress(PYPI).settings, github)
    assert found is not None
    assert [r.host for r in found.allow] == ["pypi.org", "github.com"]
    assert egress_delivery.policy_for(PROXIED.settings, PYPI) == PYPI
    assert egress_delivery.policy_for(PROXIED.egress(PYPI).settings, None) == PYPI


@pytest.mark.parametrize("extra", [None, options.policy_from_options([])])
def test_a_policy_that_opens_nothing_is_none_even_without_a_proxy(extra: object) -> None:
    assert egress_delivery.policy_for(POD.settings, extra) is None  # type: ignore[arg-type]


def test_an_opening_policy_without_a_proxy_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="needs auth_proxy"):
        egress_delivery.policy_for(POD.settings, PYPI)


def test_the_pod_manifest_names_the_file_and_holds_no_proxy_variable() -> None:
    env = egress_delivery.manifest_env()
    assert env == {SESSION_ENV: egress_delivery.ENV_FILE}
    pod = session_pod.session_pod("sbx-0123456789abcdef", PROXIED.settings, ttl_s=60, now=0, env=env)
    names = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert names[SESSION_ENV] == egress_delivery.ENV_FILE
    assert not {"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} & set(names)


def test_the_write_takes_the_variables_from_stdin_into_a_0600_file(tmp_path: Path) -> None:
    body = b'{"HTTPS_PROXY": "http://ironflow:ifap_x@p:3128"}'
    argv = egress_delivery.write_command(len(body))
    assert "ifap_" not in str(argv)
    script = argv[-1].replace(egress_delivery.ENV_FILE.rsplit("/", 1)[0], str(tmp_path / "dir"))
    subprocess.run([*argv[:-1], script], input=body + b"trailing", check=True, env={"PATH": os.environ["PATH"]})
    written = tmp_path / "dir" / "session-env"
    assert written.read_bytes() == body  # exactly its size: exec's stdin has no EOF
    assert oct(written.stat().st_mode & 0o777) == "0o600"


async def test_an_agent_sandbox_session_takes_egress_only_from_a_template_rendered_with_it() -> None:
    """A claim's pod is its template's: without the pod settings' egress it names no variables' file."""
    sessions = AgentSandboxProvider(PROXIED).sessions()
    with pytest.raises(errors.ConfigError, match="rendered without egress"):
        await sessions.open(OpenOptions(egress=PYPI))
    template, _ = sandbox_steps.template_objects(AgentSandboxProvider(PROXIED.egress(PYPI)).settings)
    env = {e["name"]: e["value"] for e in template["spec"]["podTemplate"]["spec"]["containers"][0]["env"]}
    assert env[SESSION_ENV] == egress_delivery.ENV_FILE
