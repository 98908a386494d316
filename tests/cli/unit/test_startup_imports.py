"""Each ``ironflow`` command imports what it runs and nothing else (issue 31's start-up).

Every probe is a fresh interpreter running the console script's ``main`` with a command line,
then printing ``sys.modules``: a module-level import of a backend, the Kubernetes client or the
offline model server anywhere on a command's path fails here, whatever it costs in time (the
time is ``benchmarks/cli.py``'s business). ``exec`` runs its real path up to the sandbox's
launch, which a stub answers: no bubblewrap is needed, and what the launch imports is the local
backend's own.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The Kubernetes backends and their client, the model server, the session server: a local
#: ``exec`` and ``--help`` load none of them.
CLUSTER_AND_SERVERS = (
    "kubernetes_asyncio",
    "ironflow.kube.api",
    "ironflow.k8s",
    "ironflow.agent_sandbox",
    "ironflow.fake_model.server",
    "ironflow.auth_proxy.app",
    "ironflow.sandbox_router",
    "ironflow.cli.sandbox_serve",
)
#: Every backend (``--help`` and the session client load none).
BACKENDS = ("ironflow.local", "ironflow.k8s", "ironflow.agent_sandbox", "ironflow.engine.runner")
#: The HTTP stack: only a command that serves or calls over HTTP loads it.
HTTP = ("aiohttp",)

_STUB_LAUNCH = """
from ironflow.local.sandbox import blocking_run, launch

async def _launched(self, argv, **options):
    print("LAUNCHED", file=sys.stderr)
    return launch.Finished(0, b"", b"")

def _launched_blocking(processes, argv, **options):
    print("LAUNCHED", file=sys.stderr)
    return launch.Finished(0, b"", b"")

launch.SandboxProcesses.run = _launched
blocking_run.run = _launched_blocking
"""


def _loaded(argv: list[str], *, env: dict[str, str] | None = None, before: str = "") -> tuple[set[str], str]:
    """The modules loaded after ``ironflow ARGV`` ran (its exit is caught), and its stderr."""
    probe = (
        "import json, sys\n"
        f"{before}\n"
        "from ironflow.cli.app import main\n"
        f"sys.argv = ['ironflow', *{argv!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1])), done.stderr


def _under(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(f"{p}.") for p in prefixes))


def test_local_exec_loads_no_cluster_client_agent_sandbox_or_model_server() -> None:
    modules, stderr = _loaded(["exec", "--backend", "local", "--", "true"], before=_STUB_LAUNCH)
    assert "LAUNCHED" in stderr, f"exec stopped before its sandbox's launch: {stderr}"
    assert _under(modules, CLUSTER_AND_SERVERS) == [], "import these where a cluster or server is used"
    assert _under(modules, HTTP) == [], "a sandbox without network needs no HTTP stack"
    assert _under(modules, AGENT_COMMAND) == [], "a command is no agent step: none of the agent's modules"


def test_a_plain_local_exec_runs_its_sandbox_without_an_event_loop() -> None:
    """asyncio (and the ssl, logging and inspect it imports) was a third of ``exec -- true``."""
    modules, stderr = _loaded(["exec", "--", "sh", "-c", "true"], before=_STUB_LAUNCH)
    assert "LAUNCHED" in stderr, f"exec stopped before its sandbox's launch: {stderr}"
    assert _under(modules, ("asyncio", "ssl", "concurrent")) == [], "a plain command runs blocking"


#: The agent command and what only an agent step reads (its turns, its result's classes: frozen
#: dataclasses, about 1 ms apiece at import) or runs (the step's proxy).
AGENT_COMMAND = ("ironflow.cli.agent", "ironflow.claude.turns", "ironflow.results", "ironflow.local.sandbox.step_proxy")
#: What an agent step, a proxied sandbox or a session loads, and a plain command without network
#: never runs: the Claude argv, profiles and output readers, the proxy's relay, tracing, the proxy's
#: token types, sessions, the cluster's values.
AGENT_STEP_AND_PROXY = (
    "ironflow.claude.command",
    "ironflow.claude.profile",
    "ironflow.local.sandbox.forwarder",
    "ironflow.claude.output",
    "ironflow.claude.rate_limits",
    "ironflow.tracing",
    "opentelemetry",
    "ironflow.auth_proxy.tokens",
    "ironflow.auth_proxy.relays",
    "ironflow.auth_proxy.registry",
    "ironflow.sessions",
    "ironflow.kube",
)


def test_local_exec_loads_nothing_of_an_agent_step_or_a_proxy() -> None:
    modules, stderr = _loaded(["exec", "--", "true"], before=_STUB_LAUNCH)
    assert "LAUNCHED" in stderr, f"exec stopped before its sandbox's launch: {stderr}"
    assert _under(modules, AGENT_STEP_AND_PROXY) == [], "load these where a step, a proxy or a session runs"
    assert _under(modules, ("ironflow.egress", "ironflow.cli.egress_options", "ironflow.cli.workspace")) == [], (
        "no --allow-host, --egress or --workspace: none of their modules"
    )


#: A workspace's modules (its spec, copies, snapshots, the git hosts' credentials, retries' kept
#: copies): a command with no ``--workspace`` and no writable mount runs none of them.
WORKSPACES = ("ironflow.workspaces", "ironflow.local.workspaces", "ironflow.auth_proxy.git_hosts")


def test_local_exec_without_a_workspace_loads_no_workspace_module() -> None:
    modules, stderr = _loaded(["exec", "--", "true"], before=_STUB_LAUNCH)
    assert "LAUNCHED" in stderr, f"exec stopped before its sandbox's launch: {stderr}"
    assert _under(modules, WORKSPACES) == [], "load these where a workspace or a writable mount is used"


#: The Docker sandbox's modules: only ``--isolation docker`` loads them.
DOCKER = ("ironflow.local.sandbox.docker", "ironflow.local.sandbox.docker_engine")


def test_local_exec_loads_docker_only_with_isolation_docker(tmp_path: Path) -> None:
    modules, stderr = _loaded(["exec", "--", "true"], before=_STUB_LAUNCH)
    assert "LAUNCHED" in stderr, f"exec stopped before its sandbox's launch: {stderr}"
    assert _under(modules, DOCKER) == [], "a bubblewrap sandbox needs no Docker code"
    # No daemon answers there: the command stops at its one line, having loaded the Docker engine.
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    modules, stderr = _loaded(["exec", "--isolation", "docker", "--", "true"], env=env)
    assert "ironflow.local.sandbox.docker_engine" in modules, stderr
    assert _under(modules, CLUSTER_AND_SERVERS + HTTP) == []


#: gVisor's sandbox, and what only a gVisor run, a root worker's staged binds or a workspace's copy
#: calls (ctypes, and ``platform``, whose one use was the machine's name): a bubblewrap ``exec`` loads none.
GVISOR_AND_CTYPES = ("ironflow.local.sandbox.gvisor", "ctypes", "platform")


def test_a_bubblewrap_exec_loads_nothing_of_gvisor_or_ctypes() -> None:
    modules, stderr = _loaded(["exec", "--", "true"], before=_STUB_LAUNCH)
    assert "LAUNCHED" in stderr, f"exec stopped before its sandbox's launch: {stderr}"
    assert _under(modules, GVISOR_AND_CTYPES) == [], "load these where a gVisor run or a staged bind needs them"


def test_local_exec_help_loads_no_cluster_client() -> None:
    modules, _ = _loaded(["exec", "--help"])
    assert _under(modules, CLUSTER_AND_SERVERS + HTTP) == []


def test_help_loads_no_backend_and_no_http_stack() -> None:
    modules, _ = _loaded(["--help"])
    assert _under(modules, BACKENDS + HTTP + CLUSTER_AND_SERVERS) == []


@pytest.mark.parametrize("argv", [["--help"], ["exec", "--help"], ["sandbox", "exec", "--help"], ["runs", "--help"]])
def test_help_is_drawn_without_rich(argv: list[str]) -> None:
    """Typer's rich help cost about 60 ms a call (its markdown and traceback modules); help is plain."""
    modules, stderr = _loaded(argv)
    assert "Usage: ironflow" not in stderr
    assert _under(modules, ("rich", "typer.rich_utils", "markdown_it")) == []


def test_runs_list_loads_no_backend_and_no_http_stack(tmp_path: Path) -> None:
    store = tmp_path / "engine.db"
    opened = (
        "import asyncio\n"
        "from ironflow.engine.store import open_store\n"
        "async def _make():\n"
        f"    s = open_store({str(store)!r}); await s.open(); await s.close()\n"
        "asyncio.run(_make())\n"
    )
    subprocess.run([sys.executable, "-c", opened], check=True, timeout=60)
    modules, stderr = _loaded(["runs", "list", "--store", str(store)])
    assert "error" not in stderr, stderr
    assert _under(modules, ("typer", "click")) == [], "the common call is read without Typer"
    assert _under(modules, ("asyncio", "ironflow.engine.sqlite")) == [], "a SQLite store is read on this thread"
    assert _under(modules, BACKENDS + HTTP + CLUSTER_AND_SERVERS) == []
    assert _under(modules, WORKER) == [], "listing reads the store: none of the worker's modules"


#: What runs a workflow (``runs show`` reads its pod selector, ``cancel``/``retry`` change runs).
WORKER = ("ironflow.engine.running", "ironflow.engine.worker", "ironflow.engine.run_changes", "ironflow.steps")


def test_sandbox_exec_loads_the_one_call_client_only(tmp_path: Path) -> None:
    """No server token here: the command stops where it would connect, its client loaded, and
    neither the sessions' async client nor an event loop."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_")}
    env.update(XDG_RUNTIME_DIR=str(tmp_path), HOME=str(tmp_path))
    argv = ["sandbox", "exec", "--server", "http://127.0.0.1:1", "sbx-0123456789abcdef", "--", "true"]
    modules, stderr = _loaded(argv, env=env)
    assert "ironflow.sessions.one_call" in modules, stderr
    assert "no sandbox server token" in stderr, stderr
    assert _under(modules, BACKENDS + CLUSTER_AND_SERVERS + ("rich", "sqlite3")) == []
    slow = ("ironflow.sessions.remote", "ironflow.sessions.client", "ironflow.sessions.values", "asyncio")
    assert _under(modules, slow) == [], "one command on a plain-HTTP server goes by a blocking socket"


#: The command-line parser's own modules: the common call of a hot command loads neither.
PARSER = ("typer", "click", "rich")


@pytest.mark.parametrize(
    ("argv", "before"),
    [
        (["exec", "--", "true"], _STUB_LAUNCH),
        (["-q", "exec", "--isolation", "bwrap", "--timeout", "5", "-o", "json", "true"], _STUB_LAUNCH),
        (["sandbox", "exec", "sbx-0123456789abcdef", "--server", "http://127.0.0.1:1", "--", "true"], ""),
    ],
)
def test_the_common_call_of_a_hot_command_loads_no_parser(argv: list[str], before: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_")}
    env.update(XDG_RUNTIME_DIR=str(tmp_path), HOME=str(tmp_path), IRONFLOW_SANDBOX_TOKEN="t" * 32)
    modules, stderr = _loaded(argv, env=env, before=before)
    assert "LAUNCHED" in stderr or "could not be reached" in stderr, stderr
    assert _under(modules, PARSER) == [], "read by ironflow.cli.quick, run by the command's own function"


def test_a_call_that_is_not_common_is_typers(tmp_path: Path) -> None:
    """An option outside the common form (``--patch -``, a value starting with ``-``) goes to Typer."""
    modules, stderr = _loaded(["exec", "--patch", "-", "--", "true"], before=_STUB_LAUNCH)
    assert "typer" in modules, stderr


def test_sandbox_exec_on_a_plain_http_server_loads_no_http_stack(tmp_path: Path) -> None:
    """With a token it calls the server (a closed port: exit 3, one line) by hand, without aiohttp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONFLOW_")}
    env.update(XDG_RUNTIME_DIR=str(tmp_path), HOME=str(tmp_path), IRONFLOW_SANDBOX_TOKEN="t" * 32)
    argv = ["sandbox", "exec", "--server", "http://127.0.0.1:1", "sbx-0123456789abcdef", "--", "true"]
    modules, stderr = _loaded(argv, env=env)
    assert "could not be reached" in stderr, stderr
    assert _under(modules, (*HTTP, "yarl", "multidict")) == [], "a session's call to a server goes by hand"


def test_egress_check_loads_no_backend_and_no_http_stack() -> None:
    modules, stderr = _loaded(["egress", "check", "--allow-host", "pypi.org", "https://pypi.org/"])
    assert "ironflow.egress.policy" in modules, stderr
    assert _under(modules, BACKENDS + HTTP + CLUSTER_AND_SERVERS + ("ironflow.engine", "sqlite3")) == []


_STUB_LAUNCH_SAYS_GC = _STUB_LAUNCH.replace(
    'print("LAUNCHED", file=sys.stderr)', 'import gc; print("LAUNCHED gc", gc.isenabled(), file=sys.stderr)'
)


@pytest.mark.parametrize(
    "argv",
    [["exec", "--", "true"], ["exec", "-ojson", "--", "true"]],  # -ojson: read by Typer only
    ids=["common-call", "typer-call"],
)
def test_a_command_runs_with_the_cycle_collector_on(argv: list[str]) -> None:
    """Start-up turns the collector off (app.main); the command's own work must not run without it:
    a long ``exec`` or ``run`` would keep every cycle it makes."""
    _, stderr = _loaded(argv, before=_STUB_LAUNCH_SAYS_GC)
    assert "LAUNCHED gc True" in stderr, stderr


def test_the_exit_freezes_every_object_first() -> None:
    """The interpreter's last collections walk no object of the command's (app.main registers
    ``gc.freeze`` at exit): the process ends with all of them in the permanent generation."""
    probe = (
        "import atexit, gc, os, sys\n"
        "atexit.register(lambda: os.write(2, f'frozen {gc.get_freeze_count()}\\n'.encode()))\n"
        "from ironflow.cli.app import main\n"
        "sys.argv = ['ironflow', '--help']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    said = [line for line in done.stderr.splitlines() if line.startswith("frozen ")]
    assert said, done.stderr
    assert int(said[0].split()[1]) > 10_000, said


def test_a_call_that_fails_before_its_command_leaves_the_collector_on() -> None:
    """main() run in a process that goes on (a test, a wrapper) leaves the collector as it found it."""
    from ironflow.cli.app import main

    was = sys.argv
    sys.argv = ["ironflow", "exec", "--timeout", "0", "--", "true"]  # a value the common call refuses: Typer's
    try:
        with pytest.raises(SystemExit):
            main()
    finally:
        sys.argv = was
    assert gc.isenabled()
