"""The one place the CLI builds what a command runs on: a provider per ``--backend`` (from
``--provider FILE`` and the options), the offline model of ``--fake-model``, and the cluster of
``--kubeconfig`` / ``--context``.

Every command refuses the same input with the same words: a missing or unreadable provider
file, an unknown setting, a wrong type all exit 2 with one ``error: …`` line naming the setting
(the messages are the providers' ``from_file``).

A backend's modules load in the function that builds it, never with this module: every command
that runs imports this one, and ``ironflow exec`` on the local backend must not pay for the
Kubernetes client, agent-sandbox or the offline model server (tests/cli/unit/test_startup_imports.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ironflow import errors, settings_file
from ironflow.cli import exits
from ironflow.cli.inputs import Backend, Isolation
from ironflow.fake_model import script as fake_model
from ironflow.fake_model.script import Script

if TYPE_CHECKING:
    from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
    from ironflow.auth_proxy import relays as relay_specs
    from ironflow.auth_proxy.git_hosts import GitHosts
    from ironflow.egress import EgressPolicy
    from ironflow.k8s.pod_provider import K8sEphemeralProvider
    from ironflow.kube import clusters
    from ironflow.kube.api import KubeApi
    from ironflow.kube.resources import Resource
    from ironflow.local.sandbox.environment import ProxyCredential
    from ironflow.local.sandbox_provider import LocalSandboxProvider
    from ironflow.provider import AgentProvider
    from ironflow.sessions.backend import SessionBackend
    from ironflow.sessions.pools import PoolPolicy

__all__ = [
    "FAKE_MODEL_KEY",
    "Backend",
    "Isolation",
    "Providers",
    "agent_sandbox_provider",
    "build_provider",
    "cluster_of",
    "connect",
    "conversations_claim_of",
    "file_egress_profiles",
    "k8s_provider",
    "kube_cluster",
    "pooled_sessions",
    "require_namespace",
    "session_backend",
    "where",
    "with_git_hosts",
]

_P = TypeVar("_P")


def k8s_provider(path: Path | None) -> K8sEphemeralProvider:
    """The provider ``--provider FILE`` names, or exit 2 naming what is wrong with it."""
    from ironflow.k8s.pod_provider import K8sEphemeralProvider

    return _provider_file(path, Backend.K8S, "docs/k8s-provider.md", K8sEphemeralProvider.from_file)


def with_git_hosts(provider: K8sEphemeralProvider, hosts: GitHosts) -> K8sEphemeralProvider:
    """``provider`` cloning git workspaces with ``hosts``' tokens (kept in the auth proxy); exits 2
    when that cannot work."""
    if provider.settings.auth_proxy_url is None:
        exits.fail("a git workspace on --backend k8s needs auth_proxy in the provider file: the pod clones through it")
    try:
        return provider.git_credentials(hosts)
    except errors.ConfigError as exc:
        exits.fail(exc.message)


def agent_sandbox_provider(path: Path | None, git_hosts: GitHosts | None = None) -> AgentSandboxProvider:
    """The agent-sandbox provider ``--provider FILE`` names (cloning git workspaces with
    ``git_hosts``' tokens, kept in the auth proxy), or exit 2 naming what is wrong."""
    from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider

    sandboxes = _provider_file(path, Backend.AGENT_SANDBOX, "docs/agent-sandbox.md", AgentSandboxProvider.from_file)
    if git_hosts is None:
        return sandboxes
    pod = with_git_hosts(sandboxes.settings.pod, git_hosts)  # the clone's grant is the pod settings'
    return AgentSandboxProvider(dataclasses.replace(sandboxes.settings, pod=pod))


def file_egress_profiles(backend: Backend, path: Path | None) -> Mapping[str, EgressPolicy]:
    """The ``egress_profiles:`` of a k8s provider file (agent-sandbox: its pod settings'), the names
    ``--egress-profile`` may use besides the shipped ones; exits 2 naming what is wrong with the file."""
    if backend is Backend.AGENT_SANDBOX:
        return agent_sandbox_provider(path).settings.pod.settings.egress_profiles
    return k8s_provider(path).settings.egress_profiles


def _provider_file(path: Path | None, backend: Backend, doc: str, load: Callable[[Path], _P]) -> _P:
    if path is None:
        exits.fail(f"--backend {backend} needs --provider provider.yaml (see {doc})")
    try:
        return load(path)
    except errors.ConfigError as exc:
        exits.fail(exits.in_file("provider file", path, exc.message))


#: A mirror or a test's loopback server for every relay of ``ironflow exec|agent`` on the local
#: backend (as ``IRONFLOW_GIT_UPSTREAM`` is for a git workspace).
RELAY_UPSTREAM_ENV: Final = "IRONFLOW_RELAY_UPSTREAM"


def relay_upstream() -> str | None:
    """Where relays go instead of ``https://<host>`` (:data:`RELAY_UPSTREAM_ENV`), or None."""
    return os.environ.get(RELAY_UPSTREAM_ENV, "").strip() or None


def build_provider(
    backend: Backend,
    *,
    provider_file: Path | None = None,
    isolation: Isolation = Isolation.BWRAP,
    timeout: float | None = None,
    credential: ProxyCredential | None = None,
    git_hosts: GitHosts | None = None,
    relays: tuple[relay_specs.RelaySpec, ...] = (),
    egress: EgressPolicy | None = None,
) -> AgentProvider:
    """The provider of ``--backend``: local from the options (``timeout`` None: its default; ``relays``
    and ``egress`` from :mod:`ironflow.cli.egress_options`), k8s / agent-sandbox from the file
    (``egress``, the options' policy, is added to the file's, on agent-sandbox its pod settings');
    only the chosen backend's modules are imported."""
    if backend is Backend.K8S:
        provider = k8s_provider(provider_file)
        if egress is not None:
            own = provider.settings.egress
            provider = provider.egress(egress if own is None else own.merged(egress))
        return provider if git_hosts is None else with_git_hosts(provider, git_hosts)
    if backend is Backend.AGENT_SANDBOX:
        sandboxes = agent_sandbox_provider(provider_file, git_hosts)
        try:
            return sandboxes if egress is None else sandboxes.added_egress(egress)
        except errors.ConfigError as exc:
            exits.fail(exc.message)
    from ironflow.local.sandbox_provider import DEFAULT_TIMEOUT_S, LocalSandboxProvider

    limit = DEFAULT_TIMEOUT_S if timeout is None else timeout
    return LocalSandboxProvider(
        isolation=isolation.value,
        timeout=limit,
        credential=credential,
        git_hosts=git_hosts,
        relays=relays,
        relay_upstream=relay_upstream() if relays else None,
        egress=egress,
    )


def session_backend(
    backend: Backend,
    *,
    provider_file: Path | None = None,
    isolation: Isolation | None = None,
    git_hosts: GitHosts | None = None,
    pool: PoolPolicy | None = None,
    keep_sessions: bool = False,
) -> SessionBackend:
    """The sandbox sessions of ``--backend``: the provider's own (``provider.sessions()``), local
    from ``--isolation`` (with ``pool``, sandboxes kept warm; ``keep_sessions``, sandboxes that outlive
    the server), k8s / agent-sandbox from the file; bad input exits 2 with one line."""
    if isolation is not None and backend is not Backend.LOCAL:
        exits.fail(f"--isolation is for --backend local: a {backend} session's isolation is its pod's runtime class")
    if provider_file is not None and backend is Backend.LOCAL:
        exits.fail("--provider is for --backend k8s or agent-sandbox: local sessions need no provider file")
    from ironflow.provider import sessions_of

    if pool is not None and backend is not Backend.LOCAL:
        exits.fail(f"--pool is for --backend local: a {backend} session's warm pool is the cluster's")
    try:
        provider = build_provider(  # docker: the daemon is asked here
            backend, provider_file=provider_file, isolation=isolation or Isolation.BWRAP, git_hosts=git_hosts
        )
        # gVisor: runsc is looked for here; docker: a non-root worker is refused
        local = backend is Backend.LOCAL and (pool is not None or keep_sessions)
        return pooled_sessions(provider, pool, keep_sessions=keep_sessions) if local else sessions_of(provider)
    except errors.IronflowError as exc:
        exits.fail_for(exc)


def pooled_sessions(provider: AgentProvider, pool: PoolPolicy | None, *, keep_sessions: bool = False) -> SessionBackend:
    """The local provider's sessions with ``pool``'s sandboxes kept warm, and kept across a restart
    with ``keep_sessions`` (its flags are checked to be ``--backend local``'s before this)."""
    from ironflow.local.sandbox_provider import LocalSandboxProvider

    assert isinstance(provider, LocalSandboxProvider)
    return provider.sessions(pool=pool, keep_sessions=keep_sessions)


def _as(provider: AgentProvider, module: str, name: str) -> Any:
    """``provider`` if it is an instance of ``module.name``, else None. The module is looked up, not
    imported: no instance of a class never loaded can exist, and a local step must not load the
    Kubernetes backend to learn it is not one."""
    loaded = sys.modules.get(module)
    return provider if loaded is not None and isinstance(provider, getattr(loaded, name)) else None


def _k8s(provider: AgentProvider) -> K8sEphemeralProvider | None:
    found: K8sEphemeralProvider | None = _as(provider, "ironflow.k8s.pod_provider", "K8sEphemeralProvider")
    return found


def _agent_sandbox(provider: AgentProvider) -> AgentSandboxProvider | None:
    found: AgentSandboxProvider | None = _as(provider, "ironflow.agent_sandbox.claim_provider", "AgentSandboxProvider")
    return found


def cluster_of(provider: AgentProvider) -> clusters.ClusterConfig | None:
    """The cluster a provider's steps run on (None: local, or the default kubeconfig)."""
    if (pods := _k8s(provider)) is not None:
        return pods.settings.cluster
    if (claimed := _agent_sandbox(provider)) is not None:
        return claimed.cluster_config
    return None


def conversations_claim_of(provider: AgentProvider) -> str | None:
    """The PVC a provider keeps Claude Code's conversations on (``sandbox.sessions_claim``), None: none kept."""
    if (pods := _k8s(provider)) is not None:
        return pods.settings.conversations_claim
    if (claimed := _agent_sandbox(provider)) is not None:
        return claimed.settings.pod.settings.conversations_claim
    return None


def where(provider: AgentProvider) -> str:
    """Where ``provider``'s steps run, for a progress line."""
    local: LocalSandboxProvider | None = _as(provider, "ironflow.local.sandbox_provider", "LocalSandboxProvider")
    if local is not None:
        return f"a {local.isolation} sandbox"
    if _k8s(provider) is not None:
        return "a Kubernetes pod"
    if (claimed := _agent_sandbox(provider)) is not None:
        return f"a sandbox claimed from warm pool {claimed.settings.pool} ({claimed.settings.namespace})"
    return type(provider).__name__


#: The key the in-process proxy hands the offline model server (it admits this one only).
FAKE_MODEL_KEY: Final = fake_model.FAKE_MODEL_KEY
#: What the offline model answers ``ironflow agent --fake-model`` with, unscripted.
BUILTIN_AGENT_REPLY: Final = fake_model.DEFAULT_REPLY
#: ... and every agent step of ``ironflow run`` / ``worker --fake-model``.
BUILTIN_RUN_REPLY: Final = "Looks good to me. (offline fake model)"


def fake_script(fake_model: bool, script: Path | None, builtin: str) -> Script | None:
    """The offline model's script: None (no fake), ``builtin`` as its one reply, or the YAML
    file of ``--fake-model=FILE``; exits 2 on a missing or malformed file."""
    if script is not None:
        if not script.is_file():
            exits.fail(f"fake model script '{script}' not found: pass an existing YAML file as --fake-model=FILE")
        try:
            return Script.from_yaml(str(script))
        except errors.ConfigError as exc:
            exits.fail_for(exc)
    return Script.of(default=builtin) if fake_model else None


class Providers:
    """One provider per backend, built on first use (``run``, ``worker``); the offline model server if asked."""

    def __init__(self, *, isolation: Isolation, provider_file: Path | None, fake: Script | None) -> None:
        self.isolation = isolation
        self.provider_file = provider_file
        self.fake = fake
        self.fake_credential: ProxyCredential | None = None
        self._built: dict[Backend, AgentProvider] = {}
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Providers:
        if self.fake is not None:
            from ironflow.local import offline

            self.fake_credential = await self._stack.enter_async_context(offline.offline_model(self.fake))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def get(self, backend: str | None) -> AgentProvider:
        """The provider of ``backend`` (a run's stored backend; None: local); exit 2 if it cannot be built."""
        try:
            chosen = Backend(backend or Backend.LOCAL)
        except ValueError:
            exits.fail(f"unknown backend {backend!r}; use local, k8s or agent-sandbox")
        if chosen not in self._built:
            self._built[chosen] = build_provider(
                chosen, provider_file=self.provider_file, isolation=self.isolation, credential=self.fake_credential
            )
        return self._built[chosen]

    def cluster_for(self, backend: Backend | None) -> clusters.ClusterConfig | None:
        """The cluster the provider file names for ``backend`` (None: local, or no file).

        A worker serves every backend: with ``backend=None`` the file's own shape decides
        (an agent-sandbox file has a ``pod:`` section, a k8s file never has).
        """
        if self.provider_file is None or backend is Backend.LOCAL:
            return None
        return cluster_of(self.get(backend or self._file_backend(self.provider_file)))

    @staticmethod
    def _file_backend(path: Path) -> Backend:
        """The backend a provider file is for: an agent-sandbox file has a ``pod:`` section."""
        with contextlib.suppress(errors.ConfigError):  # unreadable: the k8s loader names the problem
            if "pod" in settings_file.read(path, what="provider file"):
                return Backend.AGENT_SANDBOX
        return Backend.K8S

    async def sweep_earlier_life(self, env: Mapping[str, str]) -> str | None:
        """In a worker pod (``env`` names it: ``IRONFLOW_WORKER_POD_*``) with a provider file, delete
        what the pod's earlier life left in the agents namespace (the objects labelled with its uid);
        the log line with the counts, or None when there is nothing to sweep (outside a cluster).

        Exits 2 when only some of the pod's variables are set. A sweep that fails is a warning in the
        line, not an error: the orphan reaper takes such objects once they expire.
        """
        from ironflow.kube import owners

        try:
            owner = owners.owner_from_env(env)
        except errors.ConfigError as exc:
            exits.fail_for(exc)
        if owner is None or self.provider_file is None:
            return None
        from ironflow.k8s import reaper

        provider = self.get(self._file_backend(self.provider_file))
        also: tuple[Resource, ...] = ()
        if (claimed := _agent_sandbox(provider)) is not None:
            namespace, also = claimed.settings.namespace, (claimed.resources.claims,)
        elif (pods := _k8s(provider)) is not None:
            namespace = pods.settings.namespace
        else:
            return None
        try:
            async with await connect(cluster_of(provider)) as api:
                report = await reaper.sweep_earlier_life(api, namespace, owner.uid, also=also)
        except errors.IronflowError as exc:
            return f"boot sweep of {namespace} failed, the orphan reaper will take what expires: {exc}"
        return report.line()


def kube_cluster(kubeconfig: Path | None, context: str | None) -> clusters.ClusterConfig:
    """``--kubeconfig`` / ``--context`` of the commands that talk to a cluster without a provider
    file (``reap``, ``check``, ``sandbox``); exit 2 when the named kubeconfig file is missing."""
    from ironflow.kube import clusters

    if kubeconfig is None:
        return clusters.DefaultCluster(context)
    if not kubeconfig.is_file():
        exits.fail(f"kubeconfig file '{kubeconfig}' does not exist")
    return clusters.KubeconfigFile(str(kubeconfig), context)


async def connect(cluster: clusters.ClusterConfig | None) -> KubeApi:
    """A Kubernetes API client for ``cluster`` (None: the default kubeconfig); close it with ``async with``."""
    from ironflow.kube import api as kube

    return await kube.KubeApi.connect(cluster)


async def require_namespace(api: KubeApi, namespace: str) -> None:
    """Refuse a namespace the cluster does not have; an account that may not read namespaces is
    let through (its own calls decide then).

    Raises:
        NamespaceNotFound: the API answered 404 for it.
    """
    from ironflow.kube import api as kube

    try:
        await api.get(kube.NAMESPACES, None, namespace)
    except errors.KubeForbidden:
        return
    except errors.KubeNotFound:
        raise errors.NamespaceNotFound(f"namespace '{namespace}' does not exist in this cluster") from None
