"""A real ``ironflow sandbox serve`` process, and the ``ironflow`` CLI run as a subprocess (helpers).

Both run this tree's code (``PYTHONPATH``: the installed entry point may be another checkout's),
with the token in the environment only, never on an argv.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "serve-test-token-0123456789abcdef"
#: ``python -c`` of the CLI's entry point: the ``ironflow`` script, from this tree.
CLI = [sys.executable, "-c", "from ironflow.cli.app import main; main()"]


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_SANDBOX_")}
    return {**env, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", **extra}


def ironflow(*args: str, env: Mapping[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=dict(env), capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]
    env: dict[str, str]

    def stop(self) -> int:
        """SIGTERM, then its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def start_serve(env: Mapping[str, str], *args: str) -> Served:
    proc = subprocess.Popen(
        [*CLI, "sandbox", "serve", "--port", "0", *args],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("serving http://"):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"serve did not start: {line!r} {err[-2000:]}")
    return Served(line.split()[1], proc, {**env, "IRONFLOW_SANDBOX_SERVER": line.split()[1]})
