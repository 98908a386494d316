"""Real package managers and git inside a local sandbox, through its egress proxy, with no Claude key.

bubblewrap and gVisor; ``pip install`` from a PEP 503 index and ``npm install`` from an npm
registry (:mod:`tests.fakes.package_registries`) on the host's 127.0.0.2 over TLS with a test CA
(127.0.0.1 and localhost bypass the proxy inside the sandbox: they are its own loopback), and
``git clone`` over HTTPS through ``CONNECT`` (:mod:`tests.fakes.git_server`). Each install succeeds
when the policy names the registry's ``127.0.0.2:PORT`` and fails with the proxy's 403 when it
names another port, the registry then having seen no request. ``ironflow exec --allow-host`` runs
one of them as a subprocess, the way a user would.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.git_server import GitServer, seed_forge
from tests.fakes.local_sandbox import DOCKER
from tests.fakes.package_registries import GREETING, NPM_PACKAGE, PYPI_PACKAGE, PackageRegistries
from tests.fakes.tls_origin import OriginTls, make_tls

from ironflow import egress
from ironflow.fake_model.script import Script
from ironflow.local.offline import OfflineProvider
from ironflow.local.sandbox import bwrap, environment
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.steps import AgentConfig

ISOLATIONS = [
    pytest.param(
        "bwrap",
        marks=[pytest.mark.bwrap, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")],
    ),
    pytest.param(
        "gvisor",
        marks=[pytest.mark.gvisor, pytest.mark.skipif(shutil.which("runsc") is None, reason="gVisor not installed")],
    ),
]
#: With Docker, whose runner image has npm and git but no pip.
WITH_DOCKER = [*ISOLATIONS, DOCKER]
#: Few retries: a refusal is final (pip names its cause only in the warning of a retry).
PIP = (
    "python3 -m pip install --no-cache-dir --disable-pip-version-check --no-input --retries 1 --timeout 20 "
    "--target /tmp/site --cert /ca/ca.pem"
)
NPM_ENV = "npm_config_cache=/tmp/npm-cache npm_config_update_notifier=false npm_config_fetch_retries=0"


@pytest.fixture
def tls(tmp_path: Path) -> OriginTls:
    return make_tls(tmp_path, extra_ips=("127.0.0.2",))


@pytest.fixture
async def registries(tls: OriginTls) -> AsyncIterator[PackageRegistries]:
    async with PackageRegistries("127.0.0.2", tls.server) as served:
        yield served


def _allow(*rules: str) -> egress.EgressPolicy:
    return egress.EgressPolicy(allow=tuple(egress.parse_allow_host(rule) for rule in rules))


async def _run(isolation: environment.Isolation, script: str, tls: OriginTls, policy: egress.EgressPolicy) -> str:
    """``script`` in a fresh sandbox of a provider with no credential: its output, and ``exit=N``."""
    provider = LocalSandboxProvider(isolation=isolation, timeout=180, egress=policy)
    result = await provider.run_command(
        ["sh", "-c", f"{{ {script} ; }} 2>&1; echo exit=$?"],
        read_only_mounts=[bwrap.ReadOnlyMount(str(tls.ca_dir), "/ca")],
    )
    return result.stdout


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_pip_installs_from_an_allowed_index_and_gets_the_proxy_403_otherwise(
    isolation: environment.Isolation, tls: OriginTls, registries: PackageRegistries
) -> None:
    port = int(registries.url.rpartition(":")[2])
    install = f"{PIP} --index-url {registries.url}/simple/ {PYPI_PACKAGE}"
    check = "PYTHONPATH=/tmp/site python3 -c 'import ironflow_tiny; print(ironflow_tiny.GREETING)'"
    allowed = await _run(isolation, f"{install} && {check}", tls, _allow(f"127.0.0.2:{port}"))
    assert allowed.rstrip().endswith(f"{GREETING}\nexit=0"), allowed
    assert f"/simple/{PYPI_PACKAGE}/" in registries.paths
    registries.paths.clear()
    refused = await _run(isolation, f"{install} -v", tls, _allow(f"127.0.0.2:{port + 1}"))  # -v: pip names why
    assert "exit=0" not in refused, refused
    assert "Tunnel connection failed: 403" in refused, refused
    assert registries.paths == []


@pytest.mark.parametrize("isolation", WITH_DOCKER)
async def test_npm_installs_from_an_allowed_registry_and_gets_the_proxy_403_otherwise(
    isolation: environment.Isolation, tls: OriginTls, registries: PackageRegistries
) -> None:
    port = int(registries.url.rpartition(":")[2])
    install = (
        f"mkdir -p /tmp/app && cd /tmp/app && {NPM_ENV} npm install --no-audit --no-fund "
        f"--registry {registries.url}/npm/ --cafile /ca/ca.pem {NPM_PACKAGE}"
    )
    check = f"node -e 'console.log(require(\"{NPM_PACKAGE}\"))'"
    allowed = await _run(isolation, f"{install} && {check}", tls, _allow(f"127.0.0.2:{port}"))
    assert allowed.rstrip().endswith(f"{GREETING}\nexit=0"), allowed
    assert f"/npm/{NPM_PACKAGE}" in registries.paths
    registries.paths.clear()
    refused = await _run(isolation, install, tls, _allow(f"127.0.0.2:{port + 1}"))
    assert "exit=0" not in refused, refused
    assert "403" in refused, refused
    assert registries.paths == []


@pytest.mark.parametrize("isolation", WITH_DOCKER)
async def test_git_clones_over_https_through_connect(isolation: environment.Isolation, tmp_path: Path) -> None:
    tls = make_tls(tmp_path / "git")  # the git server's certificate names localhost (GitServer's URL)
    seed_forge(tmp_path, "localhost", {"README.md": "cloned through the egress proxy\n"})
    async with GitServer(tmp_path / "forge", username="git", password="pw", tls=tls.server) as server:
        port = int(server.url.rpartition(":")[2])
        # localhost is the sandbox's own loopback (NO_PROXY): the clone clears it to reach the host's.
        script = (
            "NO_PROXY= no_proxy= GIT_SSL_CAINFO=/ca/ca.pem GIT_TERMINAL_PROMPT=0 "
            f"git clone -q https://git:pw@localhost:{port}/localhost/org/repo.git /tmp/c && cat /tmp/c/README.md"
        )
        rule = {"host": "localhost", "ports": [port], "addresses": ["127.0.0.1/32", "::1/128"]}
        policy = egress.EgressPolicy.from_json({"allow": [rule]})
        out = await _run(isolation, script, tls, policy)
        assert out.rstrip().endswith("cloned through the egress proxy\nexit=0"), out
        assert any(r.service == "git-upload-pack" and r.status == 200 for r in server.requests)


@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")
async def test_ironflow_exec_allow_host_pip_installs_without_a_claude_key(
    tls: OriginTls, registries: PackageRegistries
) -> None:
    port = int(registries.url.rpartition(":")[2])
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    argv = ["exec", "--allow-host", f"127.0.0.2:{port}", "--mount", f"{tls.ca_dir}:/ca", "--", "sh", "-c"]
    script = f"{PIP} --index-url {registries.url}/simple/ {PYPI_PACKAGE} >/dev/null && ls /tmp/site"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from ironflow.cli.app import main; main()", *argv, script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert "ironflow_tiny" in out.decode().split()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec", "--", "sh", "-c", script,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode != 0, out.decode()  # no --allow-host: no network at all


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_an_agent_steps_bash_tool_pip_installs_through_the_providers_policy(
    isolation: environment.Isolation, tls: OriginTls, registries: PackageRegistries
) -> None:
    """The provider's ``egress`` reaches agent steps: the offline model has the agent run pip in Bash,
    then try another port; each decision is a line of the step's record (the sink's ``ironflow`` stream)."""
    port = int(registries.url.rpartition(":")[2])
    install = f"{PIP} --index-url {registries.url}/simple/ {PYPI_PACKAGE}"
    denied = f"curl -sS --max-time 10 https://127.0.0.2:{port + 1}/ || true"
    bash = {"name": "Bash", "input": {"command": f"{install}; {denied}"}}
    script = Script.from_dict({"turns": [{"tool_use": bash}, {"text": "installed"}]})
    policy = _allow(f"127.0.0.2:{port}")
    async with OfflineProvider(script, isolation=isolation, timeout=180, egress=policy) as provider:
        config = AgentConfig("install it", allowed_tools=("Bash",)).read_only_host_path(str(tls.ca_dir), "/ca")
        sink = _Lines()
        result = await provider.run(config, logs=sink)
    assert result.text == "installed"
    assert any(path.endswith(".whl") for path in registries.paths), registries.paths
    notes = [line for stream, line in sink.lines if stream == "ironflow"]
    assert f"egress allowed 127.0.0.2:{port} (CONNECT): allowed by allow 127.0.0.2:{port}" in notes, notes
    assert any(n.startswith(f"egress denied 127.0.0.2:{port + 1} (CONNECT): ") for n in notes), notes
    assert not any("ifap_" in line for _, line in sink.lines)


class _Lines:
    """A log sink that keeps every ``(stream, line)``."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))
