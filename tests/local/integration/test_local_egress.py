"""A local sandbox reaches what its egress policy allows, through the egress proxy, and nothing else.

Real bubblewrap and gVisor, real curl inside the sandbox (``HTTPS_PROXY`` points at the second
relay port), a TLS origin on the host's 127.0.0.2 with a test CA (127.0.0.1 and localhost bypass the
proxy: the model relay is there): allowed when the policy names ``127.0.0.2:PORT``, refused with the
proxy's 403 when it names another port, and without a policy the sandbox gets no proxy variables.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ironflow import egress
from ironflow.local.sandbox import bwrap, environment
from ironflow.local.sandbox.environment import ProxyCredential
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.secrets import Secret
from ironflow.testing import _kubeenv_pki as pki

CREDENTIAL = ProxyCredential(Secret("sk-ant-test-" + "e" * 20), "api_key", "http://127.0.0.1:9")
HELLO = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"


@pytest.fixture
async def origin(tmp_path: Path) -> AsyncIterator[tuple[int, Path]]:
    """A TLS server on the host's 127.0.0.2 answering ``hello``; its port and the CA's directory."""
    keys = pki.new_pki(extra_ips=("127.0.0.2",))
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir()
    (ca_dir / "ca.pem").write_bytes(keys.ca.cert_pem)
    (tmp_path / "cert.pem").write_bytes(keys.admin.cert_pem)
    (tmp_path / "key.pem").write_bytes(keys.admin.key_pem)
    ca_dir.chmod(0o755)
    (ca_dir / "ca.pem").chmod(0o644)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HELLO)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.2", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], ca_dir
    finally:
        server.close()


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
