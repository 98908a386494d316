"""Relays for any host on the local backends, bubblewrap and gVisor (issue 30, Must show): a credential relayed to a
non-git host reaches the upstream and is absent from the sandbox's environment, files, argv, logs and
the run store; a method or path outside its scope gets 403.

The upstream is an aiohttp server on loopback that records what it received; the sandbox runs
``curl`` against the relay with only the opaque ``ifap_`` tokens of ``IRONFLOW_RELAY_<NAME>_TOKEN``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import ISOLATIONS, local_sandbox
from tests.fakes.recording_upstream import RecordingUpstream, recording_upstream

from ironflow import log_lines
from ironflow.auth_proxy import relays, tokens
from ironflow.engine import model
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.worker import Worker
from ironflow.fake_model.server import FakeAnthropic, Script
from ironflow.local.sandbox_provider import Isolation, LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret, find_leaks

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed"),
]

API_HOST = "api.example.test"
MAPS_HOST = "maps.example.test"
API_SECRET = "relay-API-SECRET-0123456789abcdef"
MAPS_SECRET = "relay-MAPS-SECRET/+=9876543210"  # needs percent-encoding in a query
KEY = "sk-ant-api03-relay-test-model-key-abcdef"
WORKFLOWS = Path(__file__).parents[2] / "engine" / "integration" / "engine_workflows.py"
API = relays.RelaySpec(
    "api",
    API_HOST,
    tokens.Injection("bearer"),
    tokens.Scope(methods=("GET",), paths=("/v1/items",)),
    credential_env="IFT_API_SECRET",
)
MAPS = relays.RelaySpec("maps", MAPS_HOST, tokens.Injection("query", param="key"), credential_env="IFT_MAPS_SECRET")
#: What the sandbox shows of itself: environment, every process's argv and environment, its writable files.
SELF_SCAN = (
    "env; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; tr '\\0' '\\n' < $p/environ; done 2>/dev/null; "
    "find /tmp /home /run /var /etc -type f -exec cat {} + 2>/dev/null; true"
)
CURLS = (
    'A="Authorization: Bearer $IRONFLOW_RELAY_API_TOKEN"; '
    'curl -sS -o /dev/null -w "get=%{http_code}\\n" -H "$A" "$IRONFLOW_RELAY_API/v1/items/7?page=2"; '
    'curl -sS -w "\\npost=%{http_code}\\n" -X POST -H "$A" "$IRONFLOW_RELAY_API/v1/items"; '
    'curl -sS -w "\\nother=%{http_code}\\n" -H "$A" "$IRONFLOW_RELAY_API/v1/itemsx"; '
    'curl -sS -o /dev/null -w "maps=%{http_code}\\n" -H "Authorization: Bearer $IRONFLOW_RELAY_MAPS_TOKEN" '
    '"$IRONFLOW_RELAY_MAPS/geo?q=x&key=forged"; '
)


@pytest.fixture
async def upstream() -> AsyncIterator[RecordingUpstream]:
    """One loopback server standing for both hosts."""
    async with recording_upstream() as recorded:
        yield recorded


@pytest.fixture
def temp() -> Iterator[str]:
    """A short parent for the run temp dir: the proxy's unix socket lives there."""
    made = tempfile.mkdtemp(prefix="ifl-relay-")
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IFT_API_SECRET", API_SECRET)
    monkeypatch.setenv("IFT_MAPS_SECRET", MAPS_SECRET)


def _stored_bytes(directory: Path) -> bytes:
    """Every byte of the SQLite store's files (database, WAL, journal)."""
    return b"".join(path.read_bytes() for path in directory.glob("engine.db*"))


def _log_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    formatter = log_lines.JsonFormatter()
    return [formatter.format(record) for record in caplog.records] + [caplog.text]


@pytest.mark.usefixtures("secrets_env")
@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_relayed_credential_reaches_its_host_only_in_scope_and_never_the_sandbox(
    isolation: Isolation, upstream: RecordingUpstream, temp: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = LocalSandboxProvider(
        isolation=isolation, relays=(API, MAPS), relay_upstream=upstream.url, temp_dir=temp, timeout=60
    )
    result = await provider.run_command(["sh", "-c", CURLS + SELF_SCAN])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "get=200" in lines
    assert "post=403" in lines  # a method outside the scope
    assert "other=403" in lines  # a path outside the scope (a prefix matches whole segments only)
    assert "maps=200" in lines
    assert "request outside this secret's scope: POST /v1/items" in result.stdout
    assert f"IRONFLOW_RELAY_API=http://127.0.0.1:18080/r/{API_HOST}" in lines

    api, maps = upstream.seen  # the refused requests never left the proxy
    assert (api.method, api.path, api.query) == ("GET", f"/{API_HOST}/v1/items/7", "page=2")
    assert ("Authorization", f"Bearer {API_SECRET}") in api.headers
    assert maps.path == f"/{MAPS_HOST}/geo"
    assert maps.query == "q=x&key=relay-MAPS-SECRET%2F%2B%3D9876543210"  # the sandbox's own key= is dropped
    assert not any(name.lower() == "authorization" for name, _ in maps.headers)  # its token stays in the proxy
    assert not any("ifap_" in value for seen in upstream.seen for _, value in seen.headers)

    assert find_leaks([API_SECRET, MAPS_SECRET], result.stdout, result.stderr) == []  # env, argv, files
    assert find_leaks([API_SECRET, MAPS_SECRET, "relay-MAPS-SECRET"], _log_lines(caplog)) == []
    assert any(getattr(r, "fields", {}).get("result") == "forbidden_scope" for r in caplog.records)


@local_sandbox
@pytest.mark.usefixtures("secrets_env")
async def test_an_agent_steps_relayed_credential_is_in_no_log_and_nowhere_in_the_run_store(
    upstream: RecordingUpstream, temp: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bash = {"name": "Bash", "input": {"command": CURLS + SELF_SCAN}}
    script = Script.from_dict({"turns": [{"tool_use": bash}, {"text": "done"}]})
    store = SqliteStore(tmp_path / "engine.db")
    await store.open()
    try:
        async with FakeAnthropic(script, required_credential=KEY) as fake:
            provider = LocalSandboxProvider(
                timeout=90,
                credential=ProxyCredential(Secret(KEY), "api_key", fake.url),
                env={"CLAUDE_CODE_MAX_RETRIES": "0"},
                temp_dir=temp,
                relays=(API, MAPS),
                relay_upstream=upstream.url,
            )
            run = model.RunRecord(id=model.new_id(), workflow=f"{WORKFLOWS}:shell", input={}, backend="local")
            await store.create_run(run)
            await Worker(store, lambda _: Runner(store, provider), lease_s=30).run(until_idle=True)
            done = await store.get_run(run.id)
            assert done is not None
            assert done.status is model.RunStatus.SUCCEEDED
    finally:
        await store.close()
    reached = [(s.method, s.path) for s in upstream.seen]
    assert reached == [("GET", f"/{API_HOST}/v1/items/7"), ("GET", f"/{MAPS_HOST}/geo")]
    assert ("Authorization", f"Bearer {API_SECRET}") in upstream.seen[0].headers
    stored = _stored_bytes(tmp_path)
    assert b"get=200" in stored  # the tool's output is what was scanned
    assert b"post=403" in stored
    assert find_leaks([API_SECRET, MAPS_SECRET], stored.decode(errors="replace"), _log_lines(caplog)) == []


async def test_exec_reads_its_relays_from_a_local_provider_file(upstream: RecordingUpstream, tmp_path: Path) -> None:
    relays_file = tmp_path / "relays.yaml"
    relays_file.write_text(
        "relays:\n"
        f"  - {{name: api, host: {API_HOST}, credential_env: IFT_API_SECRET, injection: bearer,\n"
        "     scope: {methods: [GET], paths: [/v1/items]}}\n"
        f"  - {{name: maps, host: {MAPS_HOST}, credential_env: IFT_MAPS_SECRET, injection: {{query: key}}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IRONFLOW_", "IFT_"))}
    env |= {"IFT_API_SECRET": API_SECRET, "IFT_MAPS_SECRET": MAPS_SECRET, "IRONFLOW_RELAY_UPSTREAM": upstream.url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from ironflow.cli.app import main; main()", "exec", "--provider", str(relays_file),
        "--", "sh", "-c", CURLS + SELF_SCAN,
        env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err
    lines = out.decode(errors="replace").splitlines()
    assert {"get=200", "post=403", "other=403", "maps=200"} <= set(lines)
    assert [seen.path for seen in upstream.seen] == [f"/{API_HOST}/v1/items/7", f"/{MAPS_HOST}/geo"]
    assert find_leaks([API_SECRET, MAPS_SECRET], out.decode(errors="replace"), err.decode(errors="replace")) == []
