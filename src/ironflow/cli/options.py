"""What several commands share: the ``--backend`` choices, the one-line bad-input exit, the
offline model of ``--fake-model`` (``agent``, ``run``, ``worker``), the YAML-or-JSON output of the
commands that print Kubernetes objects (``render``, ``manifests``, ``sandbox``), ``--kubeconfig`` /
``--context`` (``check``, ``reap``, ``sandbox``), and ``--provider FILE`` for
``--backend k8s`` (``ironflow agent``, ``exec``, ``run``, ``worker``) and ``--backend agent-sandbox``
(``agent``, ``run``, ``worker``).

One place so every command refuses the same input with the same words: a missing or
unreadable provider file, an unknown setting, a wrong type — all exit 2 with one
``error: …`` line on stderr that names the setting (the messages are
:meth:`K8sEphemeralProvider.from_file`'s).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, TypeVar

import typer
import yaml

from ironflow import errors, labels
from ironflow.k8s.provider import K8sEphemeralProvider
from ironflow.kube import clusters
from ironflow.secrets import Secret

if TYPE_CHECKING:
    from ironflow.agent_sandbox.provider import AgentSandboxProvider
    from ironflow.fake_model.server import Script
    from ironflow.local.provider import ProxyCredential

__all__ = [
    "EXIT_BAD_INPUT",
    "FAKE_MODEL_KEY",
    "Backend",
    "ContextOption",
    "KubeconfigOption",
    "ManifestFormat",
    "agent_sandbox_provider",
    "dns_label",
    "emit_objects",
    "fail",
    "fake_model",
    "k8s_provider",
    "kube_cluster",
]

EXIT_BAD_INPUT: Final = 2
#: The key the in-process proxy hands the offline model server (it checks it).
FAKE_MODEL_KEY: Final = "sk-ant-api03-offline-fake-model-dummy-key"

_P = TypeVar("_P")


class Backend(StrEnum):
    """Where a step runs: ``--backend`` of ``agent``, ``exec`` and ``run`` (``exec``: local or k8s only)."""

    LOCAL = "local"
    K8S = "k8s"
    AGENT_SANDBOX = "agent-sandbox"


class ManifestFormat(StrEnum):
    """``--output`` of the commands that print Kubernetes objects: YAML documents or one JSON list."""

    YAML = "yaml"
    JSON = "json"


#: ``--kubeconfig`` / ``--context`` of the commands that talk to a cluster without a provider
#: file; :func:`kube_cluster` turns them into a cluster.
KubeconfigOption = Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: the usual).")]
ContextOption = Annotated[str | None, typer.Option("--context", help="Kubeconfig context.")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (bad input by default).

    Trailing whitespace goes (a failed agent's stderr ends with a newline): the line ends once.
    """
    print(f"error: {message.rstrip()}", file=sys.stderr)
    raise typer.Exit(code)


def emit_objects(objects: list[dict[str, Any]], fmt: ManifestFormat) -> None:
    """Print Kubernetes objects on stdout as ``fmt`` says: YAML documents, or one JSON list."""
    if fmt is ManifestFormat.JSON:
        typer.echo(json.dumps(objects, indent=2))
    else:
        typer.echo(yaml.safe_dump_all(objects, sort_keys=False, width=120), nl=False)


@contextlib.asynccontextmanager
async def fake_model(script: Script) -> AsyncIterator[ProxyCredential]:
    """Serve the offline model server answering ``script`` while the block runs; yield the
    credential a provider's proxy uses to reach it (the server admits :data:`FAKE_MODEL_KEY` only)."""
    from ironflow.fake_model.server import FakeAnthropic  # the HTTP server loads only when used
    from ironflow.local.provider import ProxyCredential

    async with FakeAnthropic(script, required_credential=FAKE_MODEL_KEY) as fake:
        yield ProxyCredential(Secret(FAKE_MODEL_KEY), "api_key", fake.url)


def k8s_provider(path: Path | None) -> K8sEphemeralProvider:
    """The provider ``--provider FILE`` names, or exit 2 naming what is wrong with it."""
    return _provider_file(path, Backend.K8S, "docs/k8s-provider.md", K8sEphemeralProvider.from_file)


def agent_sandbox_provider(path: Path | None) -> AgentSandboxProvider:
    """The agent-sandbox provider ``--provider FILE`` names, or exit 2 naming what is wrong."""
    from ironflow.agent_sandbox.provider import AgentSandboxProvider  # loads only for this backend

    return _provider_file(path, Backend.AGENT_SANDBOX, "docs/agent-sandbox.md", AgentSandboxProvider.from_file)


def _provider_file(path: Path | None, backend: Backend, doc: str, load: Callable[[Path], _P]) -> _P:
    if path is None:
        fail(f"--backend {backend} needs --provider provider.yaml (see {doc})")
    try:
        return load(path)
    except errors.ConfigError as exc:
        fail(exc.message)


def dns_label(value: str, what: str = "namespace") -> str:
    """``value`` if it is a valid namespace-style name, else exit 2 naming ``what``."""
    if not labels.is_dns_label(value):
        fail(f"invalid {what} '{value}': use 1-63 lowercase letters, digits and '-'")
    return value


def kube_cluster(kubeconfig: Path | None, context: str | None) -> clusters.ClusterConfig:
    """``--kubeconfig`` / ``--context`` of the commands that talk to a cluster without a provider
    file (``reap``, ``check``, ``sandbox``); exit 2 when the named kubeconfig file is missing."""
    if kubeconfig is None:
        return clusters.DefaultCluster(context)
    if not kubeconfig.is_file():
        fail(f"kubeconfig file '{kubeconfig}' does not exist")
    return clusters.KubeconfigFile(str(kubeconfig), context)
