"""``ironflow dev fake-anthropic`` as a user runs it: URL on stdout, serves, stops on Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.fake_model import FakeAnthropic

BODY = json.dumps({"model": "claude-dev-1", "messages": [{"role": "user", "content": "hi"}]}).encode()


def test_serves_the_script_prints_the_url_and_stops_on_sigint(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text('turns: ["from the dev server"]\ndefault: "again"\n')
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from ironflow.cli.app import main; main()",
            "dev",
            "fake-anthropic",
            "--port",
            "0",
            "--script",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        texts = []
        for _ in range(2):
            request = urllib.request.Request(  # noqa: S310 - loopback fake
                url + "/v1/messages", data=BODY, headers={"content-type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310 - loopback fake
                reply = json.loads(resp.read())
            texts.append(reply["content"][0]["text"])
            assert reply["model"] == "claude-dev-1"
        assert texts == ["from the dev server", "again"]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "Ctrl-C" in err


def test_bad_script_exits_2_with_one_line_naming_the_problem(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("turns: [{tool_use: {input: {}}}]\n")
    result = CliRunner().invoke(app, ["dev", "fake-anthropic", "--script", str(script)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "turns[0]: tool_use needs a name" in lines[0]
    assert result.stdout == ""


def test_missing_script_file_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["dev", "fake-anthropic", "--script", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "cannot read fake-anthropic script" in result.stderr


def test_busy_port_exits_2_naming_the_port() -> None:
    with FakeAnthropic() as busy:
        result = CliRunner().invoke(app, ["dev", "fake-anthropic", "--port", str(busy.port)])
    assert result.exit_code == 2
    assert f"127.0.0.1:{busy.port} is already in use" in result.stderr
    assert "--port" in result.stderr
