"""``ironflow exec --backend k8s --allow-host …``: the exec pod's ``HTTP(S)_PROXY`` password is an
egress-only token a real auth proxy on loopback issued for it, with the options' and the provider
file's policy; while the pod runs that token opens the allowed host on the proxy's egress listener
and nothing on the model relay (403), and once the command is done it is revoked. Without an
opening policy the pod gets no proxy variable and no token is issued."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.auth_proxy.integration.test_egress_live_policy import _get, _origin
from tests.auth_proxy.integration.test_egress_only_tokens import _relayed
from typer.testing import CliRunner

from ironflow import labels
from ironflow.auth_proxy import AuthProxyConfig, logs, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.cli.app import app
from ironflow.kube import api as k8s
from ironflow.secrets import Secret
from ironflow.testing.kube import PodScript
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"
ADMIN = "admin-key-" + "x" * 40
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ThreadedKube, Path, RunningProxy, int]]:
    """The test API server and an auth proxy with its egress listener (one loop, in a thread), a
    loopback origin, and a provider file whose ``egress:`` opens one more host."""
    st = ThreadedKube(namespaces=("default", NS))
    stack = contextlib.AsyncExitStack()
    config = AuthProxyConfig(admin_key=Secret(ADMIN), egress_host="127.0.0.1", egress_port=0)
    proxy = st.call(stack.enter_async_context(run_auth_proxy(config)))
    port = st.call(stack.enter_async_context(_origin()))
    (tmp_path / "kubeconfig.yaml").write_text(st.kubeconfig_yaml())
    provider = tmp_path / "provider.yaml"
    provider.write_text(
        f"image: busybox:1.37\nsandboxed: true\nnamespace: {NS}\nauth_proxy: {proxy.url}\n"
        "egress: {allow: [mirror.example.test]}\ncluster: {kubeconfig: kubeconfig.yaml, context: kube-test}\n"
    )
    try:
        yield st, provider, proxy, port
    finally:
        st.call(stack.aclose())
        st.close()


def _exec(provider: Path, *args: str) -> Any:
    argv = ["exec", "--backend", "k8s", "--provider", str(provider), "--timeout", "10", *args, "--", "true"]
    return CliRunner().invoke(app, argv, env={"IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN})


async def _first_pod_env(st: ThreadedKube) -> dict[str, str]:
    """The env of the first pod the command creates, as soon as it exists (and its component label,
    as ``component``)."""
    while True:
        pods = [e.obj for e in st.server.store.history if e.kind == "ADDED" and e.obj.get("kind") == "Pod"]
        if pods:
            env = {e["name"]: e.get("value", "") for e in pods[0]["spec"]["containers"][0].get("env", [])}
            return {**env, "component": pods[0]["metadata"]["labels"][labels.LABEL_COMPONENT]}
        await asyncio.sleep(0.01)


def _issued(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The fields of each ``token issued`` event the proxy logged."""
    return [getattr(r, "fields", {}) for r in caplog.records if r.getMessage() == "token issued"]


def test_the_exec_pod_reaches_what_its_policy_allows_with_an_egress_only_token_revoked_after(
    served: tuple[ThreadedKube, Path, RunningProxy, int], caplog: pytest.LogCaptureFixture
) -> None:
    st, provider, proxy, port = served
    st.soon(lambda: st.server.script_pods(PodScript(name_prefix="exec-", run_for=1.0, log="done\n")))

    async def while_it_runs() -> tuple[dict[str, str], str, int, tuple[int, str]]:
        env = await _first_pod_env(st)
        token = urllib.parse.urlsplit(env["HTTPS_PROXY"]).password or ""
        return env, token, await _get(proxy, token, port), await _relayed(proxy, token, "/v1/messages")

    probing = asyncio.run_coroutine_threadsafe(while_it_runs(), st.loop)
    with caplog.at_level(logging.INFO, logger=logs.LOGGER_NAME):
        result = _exec(provider, "--allow-host", f"127.0.0.1:{port}")
    assert result.exit_code == 0, result.output
    (fields,) = _issued(caplog)  # one token: the egress-only one, of run <pod name>, step exec
    assert fields["run_id"].startswith("exec-")
    assert fields["step"] == "exec"
    env, token, during, relayed = probing.result(timeout=10)
    assert token.startswith("ifap_")
    assert urllib.parse.urlsplit(env["HTTPS_PROXY"]).port == 3128  # the proxy Service's egress port
    assert [env[name] for name in PROXY_VARIABLES] == [env["HTTPS_PROXY"]] * 4
    assert "ANTHROPIC_AUTH_TOKEN" not in env  # an exec pod gets no Claude token at all
    assert env["component"] == "claude-runner"  # the rendered NetworkPolicies open the proxy to it
    assert during == 200  # the options' host, through the egress listener
    assert relayed == (403, "this token only reaches the egress proxy")
    assert st.call(_get(proxy, token, port)) == 407  # revoked once the command is done
    assert st.objects(k8s.PODS, NS) == []


def test_egress_profile_names_a_profile_of_the_provider_file(
    served: tuple[ThreadedKube, Path, RunningProxy, int],
) -> None:
    """``--egress-profile NAME`` finds NAME among the file's own ``egress_profiles:``, as on local."""
    st, provider, proxy, port = served
    provider.write_text(provider.read_text() + f"egress_profiles: {{origin: {{allow: ['127.0.0.1:{port}']}}}}\n")
    st.soon(lambda: st.server.script_pods(PodScript(name_prefix="exec-", run_for=1.0, log="done\n")))

    async def while_it_runs() -> int:
        env = await _first_pod_env(st)
        return await _get(proxy, urllib.parse.urlsplit(env["HTTPS_PROXY"]).password or "", port)

    probing = asyncio.run_coroutine_threadsafe(while_it_runs(), st.loop)
    result = _exec(provider, "--egress-profile", "origin")
    assert result.exit_code == 0, result.output
    assert probing.result(timeout=10) == 200  # the file's profile opened the origin
    unknown = _exec(provider, "--egress-profile", "nowhere")
    assert unknown.exit_code == 2
    assert "unknown egress profile 'nowhere'" in unknown.stderr


def test_a_policy_that_opens_nothing_issues_no_token_and_sets_no_proxy_variable(
    served: tuple[ThreadedKube, Path, RunningProxy, int], caplog: pytest.LogCaptureFixture
) -> None:
    st, provider, _, _ = served
    provider.write_text(provider.read_text().replace("egress: {allow: [mirror.example.test]}\n", ""))
    st.soon(lambda: st.server.script_pods(PodScript(name_prefix="exec-", run_for=0.05, log="done\n")))
    with caplog.at_level(logging.INFO, logger=logs.LOGGER_NAME):
        result = _exec(provider)
    assert result.exit_code == 0, result.output
    env = st.call(_first_pod_env(st))
    assert not set(PROXY_VARIABLES) & set(env)
    assert env["component"] == "pod-run"  # no network at all
    assert _issued(caplog) == []


def test_an_opening_policy_without_the_auth_proxy_is_one_line_and_exit_2(tmp_path: Path) -> None:
    provider = tmp_path / "provider.yaml"
    provider.write_text(f"image: busybox:1.37\nnamespace: {NS}\n")
    result = CliRunner().invoke(
        app, ["exec", "--backend", "k8s", "--provider", str(provider), "--allow-host", "pypi.org", "--", "true"]
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: an egress policy on Kubernetes needs auth_proxy(url): the pod reaches what it allows "
        "through the proxy's egress listener"
    )


JSON_TEXT = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "json_text.out").read_text()


@pytest.mark.parametrize("option", ["--allow-host", "--egress-profile"])
def test_an_agent_step_on_k8s_reaches_what_the_options_and_the_file_allow(
    served: tuple[ThreadedKube, Path, RunningProxy, int], option: str
) -> None:
    """``ironflow agent --backend k8s --allow-host …`` (or ``--egress-profile`` naming a profile of
    the file's own): the options' rule is added to the file's ``egress:`` (one policy on the step's
    egress token); the pod's proxy password opens both hosts, and nothing else, while the step
    runs, and is revoked after it."""
    st, provider, proxy, port = served
    with contextlib.ExitStack() as stack:
        file_port = stack.enter_context(_threaded_origin(st))
        provider.write_text(provider.read_text().replace("[mirror.example.test]", f"['127.0.0.1:{file_port}']"))
        provider.write_text(provider.read_text() + f"egress_profiles: {{origin: {{allow: ['127.0.0.1:{port}']}}}}\n")
        given = f"127.0.0.1:{port}" if option == "--allow-host" else "origin"
        st.soon(lambda: st.server.script_pods(PodScript(name_prefix="claude-code-", run_for=1.0, log=JSON_TEXT)))

        async def while_it_runs() -> tuple[dict[str, str], str, list[int]]:
            env = await _first_pod_env(st)
            token = urllib.parse.urlsplit(env["HTTPS_PROXY"]).password or ""
            return env, token, [await _get(proxy, token, p) for p in (port, file_port, 9)]

        probing = asyncio.run_coroutine_threadsafe(while_it_runs(), st.loop)
        argv = ["agent", "--backend", "k8s", "--provider", str(provider), "--timeout", "10"]
        env = {"IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, "ANTHROPIC_API_KEY": "sk-ant-x"}
        result = CliRunner().invoke(app, [*argv, option, given, "fix it"], env=env)
        assert result.exit_code == 0, result.output
        pod_env, token, during = probing.result(timeout=10)
    assert token.startswith("ifap_")
    assert [pod_env[name] for name in PROXY_VARIABLES] == [pod_env["HTTPS_PROXY"]] * 4
    assert during == [200, 200, 403]  # the option's host, the file's host, and nothing else
    assert st.call(_get(proxy, token, port)) == 407  # revoked once the step is done


@contextlib.contextmanager
def _threaded_origin(st: ThreadedKube) -> Iterator[int]:
    """A loopback origin on the test server's loop, for the length of the block; its port."""
    running = _origin()
    try:
        yield st.call(running.__aenter__())
    finally:
        st.call(running.__aexit__(None, None, None))
