"""The documented ways to run a step leave nothing open: run under ``python -X dev -W error``,
the README's quickstart and a script's ``ironflow.run_sync`` finish with no "Unclosed" client,
no ResourceWarning and no coroutine never awaited (issue 12: providers close their clients)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.fakes.local_sandbox import LOCAL_SANDBOX

LEAK_SIGNS = ("Unclosed", "ResourceWarning", "was never awaited", "Task was destroyed")


pytestmark = LOCAL_SANDBOX


def _strict_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,
        check=False,
    )


def test_the_readme_quickstart_closes_everything_it_opened() -> None:
    done = _strict_python("from ironflow.cli.app import main; main()", "agent", "--fake-model", "Say hello")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "Hello from the sandbox! (offline fake model)"
    assert not [sign for sign in LEAK_SIGNS if sign in done.stderr], done.stderr[-3000:]


def test_run_sync_from_a_script_closes_everything_it_opened() -> None:
    script = textwrap.dedent(
        """
        import asyncio, threading
        import ironflow
        from ironflow.cli.backends import FAKE_MODEL_KEY
        from ironflow.fake_model import FakeAnthropic, Script
        from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
        from ironflow.secrets import Secret

        ready, stop = threading.Event(), threading.Event()
        url = []

        async def serve():
            async with FakeAnthropic(Script.of("Hello from the sandbox!"), required_credential=FAKE_MODEL_KEY) as fake:
                url.append(fake.url)
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)

        server = threading.Thread(target=asyncio.run, args=(serve(),))
        server.start()
        ready.wait(30)
        try:
            provider = LocalSandboxProvider(credential=ProxyCredential(Secret(FAKE_MODEL_KEY), "api_key", url[0]))
            result = ironflow.run_sync(provider, ironflow.AgentConfig("Say hello"))
            print(result.text)
        finally:
            stop.set()
            server.join(30)
        """
    )
    done = _strict_python(script)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Hello from the sandbox!" in done.stdout
    assert not [sign for sign in LEAK_SIGNS if sign in done.stderr], done.stderr[-3000:]
