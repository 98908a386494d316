"""The CLI's golden outputs: every command's ``--help`` and the error lines of issue 17's table.

``python -m tests.cli.golden_update`` rewrites ``tests/cli/golden/`` from the CLI as it is now
(and removes the files of commands that are gone); review the diff, then commit it. A new
command needs nothing else: the commands are found by walking the app, groups included.

Each output is rendered in a child interpreter with a fixed environment (``COLUMNS=80``,
``NO_COLOR=1``, a scratch ``HOME``, no ``KUBECONFIG``), so this machine's terminal and settings
never reach a golden file; ``render`` is that child's entry point (JSON on stdout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ironflow.testing.ports import free_port

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parents[2]
UPDATE_COMMAND = "python -m tests.cli.golden_update"
#: The environment every golden output is rendered in (plus PATH and PYTHONPATH from here).
FIXED_ENV: Mapping[str, str] = {"COLUMNS": "80", "LINES": "40", "NO_COLOR": "1", "TERM": "dumb", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class ErrorCase:
    """One bad input: argv (``{work}`` is a scratch directory, ``{port}`` a closed loopback port),
    files made in ``{work}`` first, extra environment (None unsets), and stdin."""

    name: str
    argv: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str | None] = field(default_factory=dict)
    stdin: str | None = None


#: The error messages of issue 17's "Why" list, and the conventions' bad inputs.
ERROR_CASES: tuple[ErrorCase, ...] = (
    ErrorCase("unknown-command", ("agnet", "hi")),
    ErrorCase("unknown-subcommand", ("runs", "lst")),
    ErrorCase("unknown-sandbox-command", ("sandbox", "exc")),
    ErrorCase("unknown-option", ("agent", "--bogus", "hi")),
    ErrorCase("missing-argument", ("runs", "show")),
    ErrorCase(
        "unknown-settings-key",
        ("render", "--provider", "{work}/provider.yaml", "--prompt", "hi"),
        files={"provider.yaml": "image: busybox\nnamspace: agents\n"},
    ),
    ErrorCase("kubeconfig-env-names-no-file", ("reap", "-n", "agents"), env={"KUBECONFIG": "{work}/nonexistent"}),
    ErrorCase("kubeconfig-option-names-no-file", ("check", "-n", "agents", "--kubeconfig", "{work}/nonexistent")),
    ErrorCase(
        "auth-proxy-unreachable",
        ("auth-proxy", "revoke-run", "run-1", "--url", "http://127.0.0.1:{port}"),
        env={"IRONFLOW_AUTH_PROXY_ADMIN_KEY": "k" * 40},
    ),
    ErrorCase("auth-proxy-config", ("auth-proxy", "serve")),
    ErrorCase("agent-stdin-empty", ("agent", "--fake-model", "-"), stdin=""),
    ErrorCase("fake-model-file-missing-worker", ("worker", "--fake-model=replies.yaml")),
    ErrorCase("fake-model-not-local", ("agent", "--fake-model", "--backend", "k8s", "hi")),
    ErrorCase("isolation-agent", ("agent", "--isolation", "kvm", "hi")),
    ErrorCase("isolation-run", ("run", "wf.py:flow", "--isolation", "kvm")),
    ErrorCase("isolation-sandbox-serve", ("sandbox", "serve", "--isolation", "kvm")),
    ErrorCase("output-format", ("runs", "list", "-o", "xml")),
    ErrorCase("verbose-and-quiet", ("-v", "-q", "ps")),
)


# --- what there is to render --------------------------------------------------------------------


def _children(command: Any) -> Iterator[tuple[str, Any]]:
    import typer

    if not hasattr(command, "list_commands"):  # a leaf (typer's own click has no public Group class)
        return
    ctx = typer.Context(command)
    for name in command.list_commands(ctx):
        yield name, command.get_command(ctx, name)


def command_paths() -> list[tuple[str, ...]]:
    """Every command's path below ``ironflow`` (``()`` is ``ironflow`` itself), groups walked."""
    import typer

    from ironflow.cli.app import app

    paths: list[tuple[str, ...]] = []

    def walk(path: tuple[str, ...], command: Any) -> None:
        paths.append(path)
        for name, child in _children(command):
            if child is not None and not getattr(child, "hidden", False):
                walk((*path, name), child)

    walk((), typer.main.get_command(app))
    return paths


def help_file(path: Sequence[str]) -> str:
    """The golden file of ``ironflow PATH --help``, relative to :data:`GOLDEN`."""
    return "help/" + "-".join(("ironflow", *path)) + ".txt"


def error_file(case: ErrorCase) -> str:
    return f"errors/{case.name}.txt"


def expected_files() -> list[str]:
    """Every golden file the CLI as it is now should have."""
    return [help_file(p) for p in command_paths()] + [error_file(c) for c in ERROR_CASES]


# --- rendering (in the child interpreter) -------------------------------------------------------


def _invoke(argv: Sequence[str], *, env: Mapping[str, str | None] | None = None, stdin: str | None = None) -> Any:
    from typer.testing import CliRunner

    from ironflow.cli.app import app

    return CliRunner().invoke(app, list(argv), env=dict(env or {}), input=stdin, prog_name="ironflow")


def _render_error(case: ErrorCase, work: Path, port: int) -> str:
    def fill(text: str) -> str:
        return text.replace("{work}", str(work)).replace("{port}", str(port))

    for name, text in case.files.items():
        (work / name).write_text(text)
    env = {key: None if value is None else fill(value) for key, value in case.env.items()}
    done = _invoke([fill(a) for a in case.argv], env=env, stdin=case.stdin)
    command = " ".join(case.argv)
    shown = f"$ ironflow {command}\nexit {done.exit_code}\n--- stderr\n{done.stderr}--- stdout\n{done.stdout}"
    return shown.replace(str(work), "{work}").replace(f":{port}", ":{port}")


def render() -> dict[str, str]:
    """Every golden output by file name; run in the fixed environment (:func:`rendered`)."""
    out = {help_file(p): _invoke([*p, "--help"]).stdout for p in command_paths()}
    port = free_port()
    for case in ERROR_CASES:
        with tempfile.TemporaryDirectory() as work:
            cwd = os.getcwd()
            os.chdir(work)
            try:
                out[error_file(case)] = _render_error(case, Path(work), port)
            finally:
                os.chdir(cwd)
    return out


def rendered() -> dict[str, str]:
    """:func:`render` in a child interpreter with :data:`FIXED_ENV` and a scratch ``HOME``."""
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", **FIXED_ENV}
        done = subprocess.run(
            [sys.executable, "-m", "tests.cli.golden_update", "render"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"rendering the golden outputs failed:\n{done.stderr[-3000:]}")
    result: dict[str, str] = json.loads(done.stdout)
    return result


def update() -> list[str]:
    """Rewrite :data:`GOLDEN` from the CLI; returns the files written or removed."""
    fresh = rendered()
    changed = []
    for name, text in fresh.items():
        path = GOLDEN / name
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(f"wrote {name}")
    for path in sorted(GOLDEN.rglob("*.txt")):
        name = path.relative_to(GOLDEN).as_posix()
        if name not in fresh:
            path.unlink()
            changed.append(f"removed {name}")
    return changed


if __name__ == "__main__":
    if sys.argv[1:] == ["render"]:
        print(json.dumps(render()))
    else:
        for line in update() or ["tests/cli/golden is up to date"]:
            print(line)
