"""A local sandbox reaches what its egress policy allows, through the egress proxy, and nothing else.

Real bubblewrap and gVisor, real curl inside the sandbox (``HTTPS_PROXY`` points at the second
relay port), a TLS origin on the host's 127.0.0.2 with a test CA (127.0.0.1 and localhost bypass the
proxy: the model relay is there): allowed when the policy names ``127.0.0.2:PORT``, refused with the
proxy's 403 when it names another port, and without a policy the sandbox gets no proxy variables.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.fakes.tls_origin import hello_origin, make_tls

from ironflow import egress
from ironflow.local.sandbox import bwrap, environment
from ironflow.local.sandbox.environment import ProxyCredential
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.secrets import Secret

CREDENTIAL = ProxyCredential(Secret("sk-ant-test-" + "e" * 20), "api_key", "http://127.0.0.1:9")


@pytest.fixture
async def origin(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    """A TLS server on the host's 127.0.0.2 answering ``hello``; its port and the CA's directory."""
    tls = make_tls(tmp_path, extra_ips=("127.0.0.2",))
    async with hello_origin("127.0.0.2", tls.server) as port:
        yield port, tls.ca_dir


async def _curl(isolation: environment.Isolation, port: int, ca_dir: Path, policy: egress.EgressPolicy | None) -> str:
    provider = LocalSandboxProvider(isolation=isolation, timeout=60, credential=CREDENTIAL)
    script = (
        'env | grep -ci "^https*_proxy=" ; '
        f"out=$(curl -sS --max-time 20 --cacert /ca/ca.pem https://127.0.0.2:{port}/ 2>&1); code=$?; "
        'echo "$out"; echo exit=$code'
    )
    result = await provider.run_command(
        ["sh", "-c", script],
        auth_proxy=True,
        egress=policy,
        read_only_mounts=[bwrap.ReadOnlyMount(str(ca_dir), "/ca")],
    )
    return result.stdout


def _allow(*rules: str) -> egress.EgressPolicy:
    return egress.EgressPolicy(allow=tuple(egress.parse_allow_host(rule) for rule in rules))


@pytest.mark.parametrize(
    "isolation",
    [
        pytest.param(
            "bwrap",
            marks=[
                pytest.mark.bwrap,
                pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
            ],
        ),
        pytest.param(
            "gvisor",
            marks=[
                pytest.mark.gvisor,
                pytest.mark.skipif(shutil.which("runsc") is None, reason="gVisor not installed"),
            ],
        ),
    ],
)
async def test_curl_in_the_sandbox_reaches_only_what_the_policy_allows(
    isolation: environment.Isolation, origin: tuple[int, Path]
) -> None:
    port, ca_dir = origin
    allowed = await _curl(isolation, port, ca_dir, _allow(f"127.0.0.2:{port}"))
    refused = await _curl(isolation, port, ca_dir, _allow(f"127.0.0.2:{port + 1}"))
    without = await _curl(isolation, port, ca_dir, None)
    assert allowed.split() == ["4", "hello", "exit=0"], allowed
    assert refused.startswith("4\n"), refused
    assert "403" in refused
    assert "exit=0" not in refused
    assert without.startswith("0\n"), without  # no proxy variables: curl has no way out
    assert "hello" not in without
