"""Layers point one way (docs/architecture.md): the contracts in pyproject.toml hold, no module
of ironflow takes part in an import circle, and the package faces load nothing they need not.

``lint-imports`` (import-linter, run by scripts/check and here) checks the layer contract, the
one kubernetes_asyncio user and the pure modules' freedom from I/O libraries. The cycle check
below counts every import, at module level or inside a function, so a circle cannot hide behind
a lazy import. The start-up probes run a fresh interpreter and read ``sys.modules``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ironflow

PACKAGE = Path(ironflow.__file__).parent
ROOT = PACKAGE.parents[1]


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, here: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The ironflow modules an import statement loads (a package's ``__init__`` counts as a module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = here.split(".") if is_package else here.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name.startswith("ironflow"):
            yield name


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the ironflow modules it imports anywhere in its body (pure: reads files only)."""
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = {
            target
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for target in _imported(node, name, path.name == "__init__.py", known)
        }
        graph[name] = edges - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_check_finds_a_circle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "ironflow"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from ironflow.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ironflow.sub.a import X\n")
    (pkg / "c.py").write_text("from . import errors\n")
    (pkg / "errors.py").write_text("")
    assert circles(import_graph(pkg)) == [["ironflow.sub.a", "ironflow.sub.b"]]


def test_no_module_of_ironflow_takes_part_in_an_import_circle() -> None:
    assert circles(import_graph()) == []


#: The named exceptions to "imports at the top of the module": each defers a costly third-party
#: library to the one path that needs it. (The CLI defers whole command modules through
#: the tables of ``cli/app.py`` and ``cli/sandbox.py``, through ``cli/lazy.py``, and ``kube/api.py``
#: defers ``kubernetes_asyncio``.)
DEFERRED_IMPORTS = {
    ("ironflow.engine.store", "ironflow.engine.postgres"): "asyncpg, only for a PostgreSQL store",
    ("ironflow.auth_proxy.app", "ironflow.auth_proxy.postgres"): "asyncpg, only for a PostgreSQL registry",
    ("ironflow.cli.temporal", "ironflow.temporal.worker"): "temporalio, the optional extra `temporal`",
    ("ironflow.cli.temporal", "ironflow.temporal.activities"): "temporalio, the optional extra `temporal`",
    ("ironflow.cli.temporal", "ironflow.temporal.sealing"): "temporalio, the optional extra `temporal`",
    # A session command against a server (local sessions) loads no Kubernetes client.
    ("ironflow.cli.session_backends", "ironflow.cli.backends"): "the cluster's modules, for --provider only",
    # The deprecated `ironflow.local.sessions.LocalSessions` (once a module) only: the package loads alone.
    ("ironflow.local.sessions", "ironflow.local.sessions.local_sessions"): "the deprecated names, on first use",
    ("ironflow.local.sessions", "ironflow.local.sandbox_provider"): "the deprecated names, on first use",
    # `sandbox diff --patch FILE` only: the other session commands stay light.
    ("ironflow.cli.sandbox_sessions", "ironflow.cli.workspace"): "the local sandbox's modules, for --patch only",
    # `sandbox open --env` only: the env's variables are judged by the local sandbox's own rules.
    ("ironflow.cli.inputs", "ironflow.local.sandbox.environment"): "the local sandbox's modules, for --env only",
    # `sandbox exec -t` only: termios and the terminal loop load with a terminal to drive.
    ("ironflow.cli.sandbox_sessions", "ironflow.cli.sandbox_terminal"): "the terminal's loop, for exec -t only",
    # A command's logging set-up: `--help` loads no logging (issue 31's start-up).
    ("ironflow.cli.root", "ironflow.cli.verbosity"): "logging's set-up, for a command that runs only",
    ("ironflow.cli.verbosity", "ironflow.log_lines"): "logging's set-up, for -v and -q only",
    # Typer, for a call the quick reader declines (ironflow.cli.quick), or a lookup of a command's Typer object.
    ("ironflow.cli.app", "ironflow.cli.root"): "Typer, for a call the quick reader declines",
    ("ironflow.cli.app", "ironflow.cli.lazy"): "Typer, for a lookup of a command's own Typer object",
    ("ironflow.cli.formats", "ironflow.results"): "the results' module, for a document with costs only",
    ("ironflow.cli.run_listing", "ironflow.cli.stores"): "the store's event loop, for a PostgreSQL store only",
    ("ironflow.cli.quick", "ironflow.cli.exits"): "the error line, for a call read here only",
    ("ironflow.cli.quick", "ironflow.cli.verbosity"): "-v and -q, for a call read here only",
    # A failing command's message only: `--help` loads no formatting module.
    ("ironflow.cli.exits", "ironflow.cli.formats"): "the terminal's formatting, for an error's line only",
    # Each command loads the backend it runs, where it builds it (tests/cli/unit/test_startup_imports.py):
    # a local `exec` no Kubernetes client, agent-sandbox, model server or auth-proxy server.
    ("ironflow.cli.one_shot", "ironflow.k8s.commands.pod_runs"): "the k8s backend, for --backend k8s only",
    ("ironflow.cli.one_shot", "ironflow.k8s.commands.egress_runs"): "the k8s backend, for --backend k8s only",
    ("ironflow.cli.one_shot", "ironflow.k8s.workspaces.command_pods"): "the k8s backend, for --backend k8s only",
    ("ironflow.cli.one_shot", "ironflow.cli.agent"): "the agent command's spinner, for --backend k8s only",
    ("ironflow.cli.one_shot", "ironflow.cli.backends"): "relays and clusters, for a provider file or k8s only",
    ("ironflow.cli.one_shot", "ironflow.cli.egress_options"): "egress, for its options or a provider file only",
    ("ironflow.cli.one_shot", "ironflow.cli.workspace"): "the workspaces' modules, for --workspace only",
    ("ironflow.cli.agent", "ironflow.local.offline"): "the offline model, for --fake-model only",
    ("ironflow.cli.backends", "ironflow.k8s.pod_provider"): "the k8s backend, for --backend k8s only",
    ("ironflow.cli.backends", "ironflow.agent_sandbox.claim_provider"): "agent-sandbox, for its backend only",
    ("ironflow.cli.backends", "ironflow.kube.api"): "the Kubernetes client (aiohttp), for a cluster only",
    ("ironflow.cli.backends", "ironflow.local.sandbox_provider"): "the local backend, for --backend local only",
    ("ironflow.cli.backends", "ironflow.k8s.reaper"): "the k8s backend's boot sweep, in a worker pod only",
    ("ironflow.cli.backends", "ironflow.local.offline"): "the offline model, for --fake-model only",
    ("ironflow.cli.stores", "ironflow.engine.store"): "the store's driver, for a command that opens one",
    ("ironflow.cli.stores", "ironflow.engine.run_refs"): "the store's driver, for a command that opens one",
    ("ironflow.local.offline", "ironflow.fake_model.server"): "aiohttp's server, while the model serves",
    ("ironflow.local.sandbox.step_proxy", "ironflow.auth_proxy.app"): "aiohttp's server, while a proxy serves",
    ("ironflow.local.sandbox.step_proxy", "ironflow.auth_proxy.config"): "cryptography, while a proxy serves",
    ("ironflow.local.sandbox_provider", "ironflow.local.sessions.local_sessions"): "the session client, in sessions()",
    ("ironflow.cli.run", "ironflow.engine.monitoring"): "aiohttp's server, for worker --metrics-port only",
    # Issue 31's start-up: a plain command without network (`ironflow exec -- true`) loads nothing of an agent
    # step's, a proxy's or a cluster's (tests/cli/unit/test_startup_imports.py).
    ("ironflow.local.sandbox_provider", "ironflow.claude.command"): "an agent step's argv, in its run only",
    ("ironflow.local.sandbox.bwrap", "ironflow.claude.profile"): "a step's profiles, only when it brings some",
    ("ironflow.local.sandbox.gvisor", "ironflow.claude.command"): "gVisor's setup script, on its runs only",
    ("ironflow.local.sandbox.gvisor", "ironflow.claude.profile"): "gVisor's setup script, on its runs only",
    ("ironflow.local.sandbox_config", "ironflow.claude.profile"): "a provider's profiles, only when it has some",
    ("ironflow.local.sandbox_provider", "ironflow.local.workspaces.step_workspaces"): "a workspace's run: git's sync",
    ("ironflow.local.sandbox.environment", "ironflow.step_sandbox"): "a step's values, the env-name rule for variables",
    ("ironflow.local.sandbox_config", "ironflow.step_sandbox"): "an agent step's host-path volumes",
    ("ironflow.local.sandbox_provider", "ironflow.claude.output"): "an agent step's output, in its run only",
    ("ironflow.local.sandbox_provider", "ironflow.claude.profile"): "an agent step's profiles, in its run only",
    ("ironflow.local.sandbox_provider", "ironflow.claude.rate_limits"): "an agent step's limits, in its run only",
    ("ironflow.local.sandbox_provider", "ironflow.tracing"): "OpenTelemetry, for an agent step's span only",
    ("ironflow.local.sandbox_provider", "ironflow.local.sandbox.step_proxy"): "a proxied command's or an agent step's",
    ("ironflow.local.sandbox_provider", "ironflow.step_timeouts"): "an agent step's timeout, in its run only",
    ("ironflow.local.sandbox_provider", "ironflow.local.workspaces.copies"): "a workspace's or writable mount's checks",
    ("ironflow.local.sandbox_provider", "ironflow.local.workspaces.bound"): "a workspace's bound, with one only",
    ("ironflow.local.sandbox_provider", "ironflow.workspaces"): "a workspace's path and commit message, with one only",
    ("ironflow.local.sandbox_config", "ironflow.auth_proxy.git_hosts"): "the git hosts, when a workspace clones",
    ("ironflow.local.sandbox_config", "ironflow.local.workspaces.kept"): "retries' kept copies, at an agent step",
    ("ironflow.results", "ironflow.workspaces"): "a stored change set, read back only",
    ("ironflow.local.sandbox.step_proxy", "ironflow.auth_proxy.registry"): "the token registry, while a proxy serves",
    ("ironflow.local.sandbox.step_proxy", "ironflow.auth_proxy.tokens"): "the token types, while a proxy serves",
    ("ironflow.local.sandbox.step_proxy", "ironflow.auth_proxy.relays"): "the relays, for a step that has some",
    ("ironflow.local.sandbox_config", "ironflow.auth_proxy.relays"): "the relays, for a provider that has some",
    ("ironflow.cli.egress_options", "ironflow.auth_proxy.relays"): "the relays, for a provider file only",
    ("ironflow.auth_proxy.git_hosts", "ironflow.auth_proxy.relays"): "a git host's relay, when a workspace clones",
    ("ironflow.auth_proxy.git_hosts", "ironflow.auth_proxy.tokens"): "a git host's secret, when a workspace clones",
    ("ironflow.cli.workspace", "ironflow.local.workspaces.git_sync"): "a git workspace's credential, for one only",
    ("ironflow.cli.backends", "ironflow.provider"): "the session backends' protocol, for a session command",
    ("ironflow.cli.backends", "ironflow.kube.clusters"): "a cluster's config, for a cluster only",
    ("ironflow.cli.backends", "ironflow.kube.owners"): "the worker pod's owner, in a worker pod only",
    # `runs list` reads the store and loads none of the worker's modules.
    ("ironflow.cli.runs", "ironflow.engine.running"): "the worker's modules, for runs show only",
    ("ironflow.cli.runs", "ironflow.engine.run_changes"): "the run changes, for runs cancel and retry only",
    # A Docker sandbox's modules load with isolation 'docker' only (tests/cli/unit/test_startup_imports.py).
    ("ironflow.local.sandbox_config", "ironflow.local.sandbox.docker_engine"): "the Docker client, for docker only",
    ("ironflow.local.sandbox.argv", "ironflow.local.sandbox.docker"): "the docker run argv, for docker only",
    # A bubblewrap run loads nothing of gVisor's (its module is milliseconds at every `ironflow exec`).
    ("ironflow.local.sandbox.argv", "ironflow.local.sandbox.gvisor"): "gVisor's argv and words, for gvisor only",
    ("ironflow.local.sandbox.launch", "ironflow.local.sandbox.gvisor"): "gVisor's kernel death, for gvisor only",
    ("ironflow.local.workspaces.copies", "ironflow.local.sandbox.gvisor"): "its refusal's words, for gvisor only",
    ("ironflow.local.workspaces.copies", "ironflow.local.sandbox.docker"): "its refusal's words, for docker only",
}


def function_level_imports(package: Path = PACKAGE) -> set[tuple[str, str]]:
    """(module, imported ironflow module) for every import made inside a function."""
    files = {_module_name(p, package): p for p in package.rglob("*.py")}
    found = set()
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import | ast.ImportFrom):
                        found |= {(name, t) for t in _imported(node, name, path.name == "__init__.py", set(files))}
    return found


def test_function_level_imports_are_only_the_named_exceptions() -> None:
    assert function_level_imports() - set(DEFERRED_IMPORTS) == set(), "import at the top of the module"


def test_the_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "import-linter is a test dependency: pip install -e '.[test]'"
    argv = [lint_imports, "--no-cache"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


#: One import each contract forbids, put into a copy of the package: (file, line, contract's name start).
DELIBERATE_BREAKS = [
    ("engine/store.py", "from ironflow.k8s import pods", "Orchestration imports no backend"),
    ("k8s/pods.py", "from ironflow.k8s.sessions import wire", "k8s: the provider composes"),
    ("local/sandbox/bwrap.py", "from ironflow.local import sandbox_provider", "local: the provider composes"),
]


def test_the_import_contracts_report_a_forbidden_import_broken(tmp_path: Path) -> None:
    """The contracts are rules, not a record: each deliberate break in a copy of the package is BROKEN."""
    lint_imports = shutil.which("lint-imports")
    assert lint_imports, "import-linter is a test dependency: pip install -e '.[test]'"
    shutil.copytree(PACKAGE, tmp_path / "src" / "ironflow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for module, line, _ in DELIBERATE_BREAKS:
        path = tmp_path / "src" / "ironflow" / module
        path.write_text(path.read_text() + f"\n{line}  # noqa: E402\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "src")}
    argv = [lint_imports, "--no-cache"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    report = " ".join(done.stdout.split())  # the report wraps long names
    assert done.returncode == 1, report[-3000:] + done.stderr[-2000:]
    for _, _, contract in DELIBERATE_BREAKS:
        verdict = re.search(r"\b(KEPT|BROKEN)\b", report[report.index(contract) :])
        assert verdict is not None, report[-3000:]
        assert verdict.group(1) == "BROKEN", f"{contract!r} kept a deliberate break: {report[-3000:]}"


def test_import_ironflow_loads_no_backend_and_warns_nothing() -> None:
    probe = (
        "import json, sys\n"
        "import ironflow\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('ironflow.k8s', 'ironflow.kube',"
        " 'ironflow.local', 'ironflow.agent_sandbox', 'ironflow.engine', 'kubernetes_asyncio', 'aiohttp')))))\n"
    )
    argv = [sys.executable, "-X", "dev", "-W", "error", "-c", probe]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


#: What ``ironflow --help`` (every command's start-up) must not load: the Kubernetes client, the
#: HTTP stack, the auth proxy's server and the test servers load inside the commands that use them.
CLI_STARTUP_SPARES = [
    "kubernetes_asyncio",
    "aiohttp",
    "ironflow.kube.api",
    "ironflow.auth_proxy.app",
    "ironflow.fake_model.server",
    "ironflow.testing.kube",
    "ironflow.testing.kubeenv",
    "ironflow.testing.postgres_server",
]


def test_the_cli_starts_without_the_clients_and_test_servers() -> None:
    probe = (
        "import json, sys\n"
        "import ironflow.cli.app\n"
        f"print(json.dumps(sorted(set(sys.modules) & {set(CLI_STARTUP_SPARES)!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], "import these inside the commands that need them"


def test_the_testing_package_loads_its_helpers_on_first_use() -> None:
    probe = (
        "import json, sys\n"
        "import ironflow.testing as t\n"
        "lazy = ('ironflow.testing.kube', 'ironflow.testing.postgres_server')\n"
        "before = sorted(m for m in lazy if m in sys.modules)\n"
        "print(json.dumps([before, sorted(n for n in t.__all__ if getattr(t, n, None) is None)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], []]
