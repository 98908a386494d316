#!/usr/bin/env python3
"""Capture the pinned Claude Code CLI's real output, for the parser's unit tests.

Runs the CLI (``ironflow.claude.cli.find_claude_cli()``) against ``FakeAnthropic`` with a
temporary HOME, once per scenario below, and writes ``<name>.out`` (stdout) plus
``cases.json`` (arguments, exit code) to ``tests/fixtures/claude/``. Temporary paths in
the output are replaced by fixed ones so the fixtures do not change with the machine.

    python scripts/capture-claude-fixtures.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ironflow.claude.cli import CLAUDE_CODE_VERSION, find_claude_cli
from ironflow.fake_model.server import ErrorTurn, FakeAnthropic, Script, TextTurn, ToolUseTurn, Usage

HOME_PLACEHOLDER = "/tmp/claude-home"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
STREAM = ["--output-format", "stream-json", "--verbose"]
JSON = ["--output-format", "json"]
WARNING_5H = {
    "anthropic-ratelimit-unified-status": "allowed_warning",
    "anthropic-ratelimit-unified-representative-claim": "five_hour",
    "anthropic-ratelimit-unified-reset": "1790000000",
    "anthropic-ratelimit-unified-5h-status": "allowed_warning",
    "anthropic-ratelimit-unified-5h-utilization": "0.82",
    "anthropic-ratelimit-unified-5h-reset": "1790000000",
    "anthropic-ratelimit-unified-5h-surpassed-threshold": "0.75",
}
WARNING_5H_LATER = {
    **WARNING_5H,
    "anthropic-ratelimit-unified-5h-utilization": "0.91",
    "anthropic-ratelimit-unified-5h-surpassed-threshold": "0.9",
}


@dataclass(frozen=True)
class Scenario:
    name: str
    script: Script
    args: tuple[str, ...]
    oauth: bool = False
    prompt: str = "Say hello"


SCENARIOS = (
    Scenario("json_text", Script.of("Hello from the fake model."), (*JSON, "--model", "sonnet")),
    Scenario("stream_text", Script.of("Hello from the fake model."), (*STREAM, "--model", "sonnet")),
    Scenario(
        "stream_tool",
        Script.of(
            ToolUseTurn("Bash", {"command": "echo tool-says-hi"}, text="Running it."),
            "The tool said tool-says-hi.",
        ),
        (*STREAM, "--model", "sonnet", "--allowedTools", "Bash"),
        prompt="Run echo",
    ),
    Scenario(
        "stream_thinking_tool",
        Script.of(
            ToolUseTurn("Bash", {"command": "echo thought"}, thinking="I should run echo."),
            TextTurn("It printed thought.", thinking="The tool answered."),
        ),
        (*STREAM, "--model", "sonnet", "--allowedTools", "Bash"),
        prompt="Think, then run echo",
    ),
    Scenario(
        "json_api_error_529",
        Script.of(ErrorTurn(529, "overloaded_error", "Overloaded")),
        (*JSON, "--model", "sonnet"),
    ),
    Scenario(
        "stream_api_error_529",
        Script.of(ErrorTurn(529, "overloaded_error", "Overloaded")),
        (*STREAM, "--model", "sonnet"),
    ),
    Scenario(
        "json_budget_exceeded",
        Script.of(TextTurn("An expensive answer.", usage=Usage(1_000_000, 1_000_000))),
        (*JSON, "--model", "sonnet", "--max-budget-usd", "0.01"),
    ),
    Scenario(
        "stream_budget_exceeded",
        Script.of(TextTurn("An expensive answer.", usage=Usage(1_000_000, 1_000_000))),
        (*STREAM, "--model", "sonnet", "--max-budget-usd", "0.01"),
    ),
    Scenario(
        "json_structured",
        Script.of(ToolUseTurn("StructuredOutput", {"answer": "42"}), "Done."),
        (*JSON, "--model", "sonnet", "--json-schema", json.dumps(SCHEMA)),
        prompt="What is the answer?",
    ),
    Scenario(
        "json_max_turns",
        Script.of(ToolUseTurn("Bash", {"command": "echo one"}), ToolUseTurn("Bash", {"command": "echo two"})),
        (*JSON, "--model", "sonnet", "--max-turns", "1", "--allowedTools", "Bash"),
        prompt="Run echo twice",
    ),
    Scenario(
        "stream_rate_limits",
        Script.of(
            ToolUseTurn("Bash", {"command": "echo limited"}, headers=WARNING_5H),
            TextTurn("Done.", headers=WARNING_5H_LATER),
        ),
        (*STREAM, "--model", "sonnet", "--allowedTools", "Bash"),
        oauth=True,
        prompt="Run echo",
    ),
)


def capture(claude: str, scenario: Scenario, out: Path) -> dict[str, object]:
    """Run one scenario and write its stdout; returns its cases.json entry."""
    with FakeAnthropic(scenario.script) as fake, tempfile.TemporaryDirectory(prefix="claude-home-") as home:
        env = fake.cli_env(home, oauth=scenario.oauth)
        argv = [claude, "-p", scenario.prompt, *scenario.args]
        proc = subprocess.run(argv, env=env, cwd=home, capture_output=True, text=True, timeout=120, check=False)
        stdout = proc.stdout.replace(home, HOME_PLACEHOLDER).replace(fake.url, "http://127.0.0.1:0")
        stdout = stdout.replace(fake.url.removeprefix("http://"), "127.0.0.1:0")
        (out / f"{scenario.name}.out").write_text(stdout)
        print(f"{scenario.name}: exit {proc.returncode}, {len(stdout.splitlines())} lines", file=sys.stderr)
        return {
            "args": ["-p", scenario.prompt, *scenario.args],
            "exit_code": proc.returncode,
            "requests": len(fake.message_requests),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tests/fixtures/claude")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to capture again")
    opts = parser.parse_args()
    claude = find_claude_cli()
    opts.out.mkdir(parents=True, exist_ok=True)
    index_path = opts.out / "cases.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"cases": {}}
    index["claude_code_version"] = CLAUDE_CODE_VERSION
    for scenario in SCENARIOS:
        if opts.only and scenario.name not in opts.only:
            continue
        index["cases"][scenario.name] = capture(claude, scenario, opts.out)
    index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
