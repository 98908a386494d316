"""Layers point one way (STYLE.md): the pure modules never reach an I/O library.

Each module listed as pure must not import, directly or through any ironflow module it
imports at load time, an HTTP/database/Kubernetes client, a socket, a subprocess or
asyncio. A fresh interpreter imports the module and the test reads ``sys.modules``, so a
lazy import inside a function (an I/O edge) is allowed, an import at load time is not.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PURE = [
    "ironflow.steps",
    "ironflow.errors",
    "ironflow.secrets",
    "ironflow.labels",
    "ironflow.settings_file",
    "ironflow.k8s.hardening",
    "ironflow.k8s.manifests",
    "ironflow.k8s.environments",
    "ironflow.kube.clusters",
    "ironflow.cluster.setup",
    "ironflow.cluster.checks",
    "ironflow.cluster.cilium",
    "ironflow.claude.layout",
    "ironflow.claude.command",
    "ironflow.claude.output",
    "ironflow.claude.profile",
    "ironflow.claude.rate_limits",
    "ironflow.auth_proxy.policy",
    "ironflow.auth_proxy.tokens",
    "ironflow.local.bwrap",
    "ironflow.local.gvisor",
    "ironflow.agent_sandbox.models",
    "ironflow.engine.model",
    "ironflow.engine.retry",
    "ironflow.cluster.dockerfile",
]

#: Load-time imports that mean I/O: network clients, databases, processes, the event loop.
IO_MODULES = {"aiohttp", "asyncpg", "kubernetes_asyncio", "socket", "subprocess", "asyncio", "sqlite3", "ssl"}


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_io_library(module: str) -> None:
    probe = (
        "import json, sys\n"
        f"before = set(sys.modules)\n"
        f"import {module}\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    offending = sorted({name.split(".")[0] for name in loaded} & IO_MODULES)
    assert offending == [], f"{module} pulls in {offending} at import time: move that import to an I/O edge"


def test_only_the_api_module_imports_kubernetes_asyncio() -> None:
    done = subprocess.run(
        ["git", "grep", "-lE", r"^\s*(import|from) kubernetes_asyncio", "--", "src"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout.split() == ["src/ironflow/kube/api.py"]


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
    "ironflow.testing.postgres",
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
        "before = sorted(m for m in ('ironflow.testing.kube', 'ironflow.testing.postgres') if m in sys.modules)\n"
        "print(json.dumps([before, sorted(n for n in t.__all__ if getattr(t, n, None) is None)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[], []]
