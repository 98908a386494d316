"""An agent-sandbox step's egress from the command line, on the REAL agent-sandbox controller and
kube-apiserver (kwok running the pod's execs on this host, as in
``test_realkube_agent_sandbox_provider.py``) with a real auth proxy on loopback.

``ironflow agent --backend agent-sandbox --allow-host …`` (or ``--egress-profile`` naming a profile
of the pod settings' own) adds its rule to the pod settings' ``egress:``: one policy on the step's
egress-only token, delivered over exec stdin after the claim is Ready. The stand-in agent plays the
pod's tools with the proxy password its shell was given, against the proxy's egress listener (its
port is the test's; the pod's variables name the Service's 3128). The decisions the proxy kept reach
the step's record when the step ends: ``-v`` shows them, and after ``ironflow run`` so does
``ironflow logs``. Skipped when the control-plane binaries are not built.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.agent_sandbox.integration.test_realkube_agent_sandbox_provider import RealEnv, _real_env
from tests.auth_proxy.integration.test_egress_live_policy import _get, _origin
from typer.testing import CliRunner

from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.auth_proxy import AuthProxyConfig, run_auth_proxy
from ironflow.auth_proxy.app import RunningProxy
from ironflow.cli.app import app
from ironflow.secrets import Secret
from ironflow.testing.kubeenv import KubeEnv

ADMIN = "admin-key-" + "s" * 40
STREAM = (Path(__file__).resolve().parents[2] / "fixtures" / "claude" / "stream_text.out").read_text()
WORKFLOWS = Path(__file__).resolve().parents[2] / "engine" / "integration" / "engine_workflows.py"
ENV = {"IRONFLOW_AUTH_PROXY_ADMIN_KEY": ADMIN, "ANTHROPIC_API_KEY": "sk-ant-egress"}

#: The pod's tools: GET each origin through the egress listener with the password of the proxy
#: variables the step's shell exported, then the real CLI's output.
AGENT = """#!/bin/sh
python3 - {ports} <<'PY' > "$HOME/fetched"
import base64, http.client, os, sys, urllib.parse
url = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
basic = base64.b64encode(f"{{url.username}}:{{urllib.parse.unquote(url.password)}}".encode()).decode()
for port in sys.argv[1:]:
    conn = http.client.HTTPConnection("127.0.0.1", {egress}, timeout=10)
    conn.request("GET", f"http://127.0.0.1:{{port}}/x", headers={{"Proxy-Authorization": "Basic " + basic}})
    print(port, conn.getresponse().status)
print("password", urllib.parse.unquote(url.password))
PY
cat '{out}'
"""


@dataclass
class Served:
    env: RealEnv
    proxy: RunningProxy
    provider: Path
    #: The origins: opened by the option, by the file's ``egress:``, and by nothing.
    option: int
    listed: int
    other: int

    def fetched(self) -> dict[str, str]:
        return dict(line.split(" ", 1) for line in (self.env.home / "fetched").read_text().splitlines())

    def notes(self) -> list[str]:
        return [
            f"egress allowed 127.0.0.1:{self.option} (GET): allowed by allow 127.0.0.1:{self.option}",
            f"egress allowed 127.0.0.1:{self.listed} (GET): allowed by allow 127.0.0.1:{self.listed}",
            f"egress denied 127.0.0.1:{self.other} (GET): 127.0.0.1 is loopback: only a rule naming it opens it",
        ]


@pytest.fixture
async def served(kube_env: KubeEnv, tmp_path: Path) -> AsyncIterator[Served]:
    """A namespace whose execs run here, a real auth proxy with its egress listener, three origins,
    and the template of a provider file whose pod ``egress:`` opens one of them, applied."""
    config = AuthProxyConfig(admin_key=Secret(ADMIN), egress_host="127.0.0.1", egress_port=0)
    async with contextlib.AsyncExitStack() as stack:
        env = await stack.enter_async_context(_real_env(kube_env, tmp_path))
        proxy = await stack.enter_async_context(run_auth_proxy(config))
        option, listed, other = [await stack.enter_async_context(_origin()) for _ in range(3)]
        assert proxy.egress is not None
        (tmp_path / "out.json").write_text(STREAM)
        egress_port = int(proxy.egress.rpartition(":")[2])
        ports = f"{option} {listed} {other}"
        env.claude.write_text(AGENT.format(ports=ports, egress=egress_port, out=tmp_path / "out.json"))
        provider = tmp_path / "sandbox.yaml"
        provider.write_text(
            "pod:\n"
            "  image: ghcr.io/acme/claude-runner:2.1.332-1\n"
            "  sandboxed: true\n"
            f"  namespace: {env.ns}\n"
            f"  claude_path: {env.claude}\n"
            "  timeout_seconds: 30\n"
            f"  auth_proxy: {proxy.url}\n"
            f"  cluster: {{kubeconfig: {kube_env.kubeconfig_path}}}\n"
            f"  egress: {{allow: ['127.0.0.1:{listed}']}}\n"
            f"  egress_profiles: {{origin: {{allow: ['127.0.0.1:{option}']}}}}\n"
            "replicas: 0\n"
            "ready_timeout_seconds: 30\n"
        )
        await AgentSandboxProvider.from_file(provider).apply_template(env.api)
        yield Served(env, proxy, provider, option, listed, other)


async def _cli(*args: str) -> Any:
    """The command in a thread: it runs its own event loop, the proxy and the origins run on this one."""
    return await asyncio.to_thread(CliRunner().invoke, app, list(args), env=ENV)


@pytest.mark.parametrize("option", ["--allow-host", "--egress-profile"])
async def test_agent_on_agent_sandbox_with_an_egress_option_reaches_that_host_and_shows_its_decisions(
    served: Served, option: str
) -> None:
    """The option's host and the file's are open to the step, nothing else; ``-v`` shows each decision
    as ironflow's line once the step ends; the token is revoked with the step."""
    given = f"127.0.0.1:{served.option}" if option == "--allow-host" else "origin"
    argv = ["agent", "--backend", "agent-sandbox", "--provider", str(served.provider), "-v"]
    result = await _cli(*argv, option, given, "fetch")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()  # the answer
    fetched = served.fetched()
    assert [fetched[str(p)] for p in (served.option, served.listed, served.other)] == ["200", "200", "403"]
    shown = [line.removeprefix("[ironflow] ") for line in result.stderr.splitlines() if line.startswith("[ironflow]")]
    assert shown == served.notes(), result.stderr
    password = fetched["password"]
    assert password.startswith("ifap_")
    assert password not in result.output
    assert await _get(served.proxy, password, served.option) == 407  # revoked with the step


async def test_an_agent_sandbox_steps_egress_decisions_are_stored_and_shown_by_ironflow_logs(
    served: Served, tmp_path: Path
) -> None:
    """``ironflow run`` stores the step's transcript; its egress decisions are ironflow's lines in it."""
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    run = ["run", f"{WORKFLOWS}:linear", "--input", '{"steps": ["fetch"]}', "--wait", "--store", store]
    result = await _cli(*run, "--backend", "agent-sandbox", "--provider", str(served.provider))
    assert result.exit_code == 0, result.output
    listed = await _cli("runs", "list", "-o", "json", "--store", store)
    (run_id,) = [r["id"] for r in json.loads(listed.stdout)]
    logs = await _cli("logs", run_id, "--store", store)
    assert logs.exit_code == 0, logs.output
    shown = [line.strip().removeprefix("[ironflow] ") for line in logs.stdout.splitlines() if "[ironflow]" in line]
    # The file's own egress: the listed origin opens, the option's origin is closed to this step.
    assert shown == [
        f"egress denied 127.0.0.1:{served.option} (GET): 127.0.0.1 is loopback: only a rule naming it opens it",
        served.notes()[1],
        served.notes()[2],
    ], logs.stdout
