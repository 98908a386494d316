"""One seam for sandbox sessions: every backend is a ``SessionBackend``, built by its provider.

Nothing here opens a session: the backends are built (no cluster is reached, no sandbox
started) and checked against the protocol, at run time and by mypy (the typed assignments).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ironflow import errors
from ironflow.agent_sandbox.claim_provider import AgentSandboxProvider
from ironflow.agent_sandbox.claim_sessions import AgentSandboxSessions
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.local.offline import OfflineProvider
from ironflow.local.sandbox import argv
from ironflow.local.sandbox_provider import LocalSandboxProvider
from ironflow.local.sessions.local_sessions import LocalSessions
from ironflow.provider import AgentProvider, SessionProvider, sessions_of
from ironflow.results import AgentResult
from ironflow.sessions import ClusterSessionBackend, OpenOptions, RemoteSessions, SessionBackend, SessionNotFound
from ironflow.sessions.backend import SessionControls, SessionSnapshots, controls_of, pause_controls_of, snapshots_of
from ironflow.sessions.values import legacy_options
from ironflow.steps import AgentConfig
from ironflow.workspaces import Workspace


@pytest.fixture
def runsc(monkeypatch: pytest.MonkeyPatch) -> None:
    """gVisor sessions look for runsc when built: a stand-in path (nothing is run)."""
    real = argv.which
    monkeypatch.setattr(argv, "which", lambda name: "/usr/bin/runsc" if name == "runsc" else real(name))


def _pod_provider() -> K8sEphemeralProvider:
    return K8sEphemeralProvider.sandboxed("runner:test").namespace("sessions")


def test_local_sessions_under_bubblewrap_are_a_session_backend(tmp_path: Path) -> None:
    sessions: SessionBackend = LocalSandboxProvider().sessions(state_dir=str(tmp_path))
    assert isinstance(sessions, LocalSessions)
    assert isinstance(sessions, SessionBackend)
    assert not isinstance(sessions, ClusterSessionBackend)  # they die with this process: nothing to let go of
    assert (sessions.backend, sessions.held()) == ("local", [])


@pytest.mark.usefixtures("runsc")
def test_local_sessions_under_gvisor_are_a_session_backend(tmp_path: Path) -> None:
    sessions: SessionBackend = LocalSandboxProvider(isolation="gvisor").sessions(state_dir=str(tmp_path))
    assert isinstance(sessions, LocalSessions)
    assert isinstance(sessions, SessionBackend)
    assert sessions.provider.isolation == "gvisor"


def test_offline_provider_hands_out_local_sessions(tmp_path: Path) -> None:
    sessions: SessionBackend = OfflineProvider().sessions(state_dir=str(tmp_path))
    assert isinstance(sessions, LocalSessions)


def test_k8s_sessions_are_a_cluster_session_backend() -> None:
    sessions: ClusterSessionBackend = _pod_provider().sessions()
    assert isinstance(sessions, K8sSessions)
    assert isinstance(sessions, ClusterSessionBackend)
    assert (sessions.backend, sessions.held()) == ("k8s", [])


def test_agent_sandbox_sessions_compose_the_k8s_host_over_claims() -> None:
    sessions: ClusterSessionBackend = AgentSandboxProvider(_pod_provider()).sessions()
    assert isinstance(sessions, AgentSandboxSessions)
    assert isinstance(sessions, ClusterSessionBackend)
    assert not isinstance(sessions, K8sSessions)  # it holds one, it is not one
    assert sessions.host.objects is sessions.objects
    assert sessions.backend == sessions.host.backend == "agent-sandbox"


async def test_remote_sessions_are_a_session_backend_that_holds_nothing_here() -> None:
    async with RemoteSessions("http://127.0.0.1:1", token="t" * 32, backend="k8s") as remote:
        sessions: SessionBackend = remote
        assert isinstance(sessions, SessionBackend)
        assert not isinstance(sessions, ClusterSessionBackend)
        assert (remote.backend, remote.held()) == ("k8s", [])
        with pytest.raises(SessionNotFound, match="held by the server"):
            remote.route("sbx-0123456789abcdef")


def test_every_session_provider_is_one_by_type() -> None:
    providers: list[SessionProvider] = [LocalSandboxProvider(), _pod_provider(), AgentSandboxProvider(_pod_provider())]
    assert all(isinstance(p, SessionProvider) for p in providers)


class _StepsOnly:
    """A provider that runs steps and keeps no session."""

    async def run(self, config: AgentConfig, *, logs: object = None) -> AgentResult:
        raise NotImplementedError

    async def release_run(self, run_id: str) -> int:
        return 0

    def account_kind(self) -> str | None:
        return None

    async def aclose(self) -> None:
        return None

    async def __aenter__(self) -> _StepsOnly:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def test_a_provider_without_sessions_says_so() -> None:
    provider: AgentProvider = _StepsOnly()
    with pytest.raises(errors.StepConfigError, match="this provider has no sandbox sessions"):
        sessions_of(provider)


def test_open_options_travel_as_the_json_the_server_reads() -> None:
    options = OpenOptions(ttl=60, idle_timeout=5, labels={"team": "a"}, run_id="run-1", env={"A": "1"})
    assert OpenOptions.from_json(options.to_json()) == options
    git = OpenOptions(workspace=Workspace.parse("https://git.example/org/repo.git@main"))
    assert git.to_json()["workspace"] == "https://git.example/org/repo.git@main"
    assert OpenOptions.from_json(git.to_json()) == git
    with pytest.raises(errors.ConfigError, match="source \\(and git ref\\) only"):
        OpenOptions(workspace=Workspace("/src", max_file_bytes=1)).to_json()
    for bad in ({"ttl": 0}, {"idle_timeout": -1}, {"backend": "docker"}, {"what": 1}, {"env": {"1A": "x"}}):
        with pytest.raises(errors.ConfigError):
            OpenOptions.from_json(bad)
    with pytest.raises(errors.ConfigError, match="positive"):
        OpenOptions(ttl=0)


def test_import_ironflow_sessions_loads_no_http_stack() -> None:
    loaded = "sorted(m for m in ('aiohttp', 'ironflow.sessions.client') if m in sys.modules)"
    probe = f"import sys, ironflow.sessions; print({loaded})"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("ironflow.sandbox_runtime", "Sandbox"),
        ("ironflow.sandbox_runtime", "AsyncSandbox"),
        ("ironflow.sandbox_runtime", "RemoteSessions"),
        ("ironflow.local.sessions", "LocalSessions"),
        ("ironflow.k8s.sessions", "K8sSessions"),
    ],
)
def test_the_old_names_still_resolve_and_warn(module: str, name: str) -> None:
    package = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="next release"):
        assert getattr(package, name) is not None


def test_the_old_local_sessions_keep_their_old_face(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("ironflow.local.sessions").LocalSessions

    sessions = old(state_dir=str(tmp_path))  # no provider: a default bubblewrap one, as before
    assert sessions.list() == []  # blocking, as before
    with pytest.raises(SessionNotFound):
        sessions.connect("sbx-0123456789abcdef")
    assert isinstance(sessions, LocalSessions)


def test_the_old_open_keywords_become_open_options_with_a_warning() -> None:
    assert legacy_options(None, {}, caller="x.open") is None
    given = OpenOptions(ttl=5)
    assert legacy_options(given, {}, caller="x.open") is given
    with pytest.warns(DeprecationWarning, match=r"x.open\(ttl=..., ...\) is deprecated"):
        old = legacy_options(
            None, {"ttl": 60, "labels": None, "workspace": "https://git.example/o/r.git@v1"}, caller="x.open"
        )
    assert old == OpenOptions(ttl=60, workspace=Workspace("https://git.example/o/r.git", ref="v1"))
    with pytest.raises(TypeError, match="not both"):
        legacy_options(given, {"ttl": 1}, caller="x.open")
    with pytest.raises(TypeError, match="'agent'"):
        legacy_options(None, {"agent": True}, caller="x.open")


class _Plain:
    """A backend with none of the optional controls (only its name is asked)."""

    backend = "plain"


async def test_local_and_remote_sessions_have_the_controls_and_cluster_ones_refuse_in_one_line(tmp_path: Path) -> None:
    local: SessionControls = LocalSandboxProvider().sessions(state_dir=str(tmp_path))
    assert controls_of(local) is local
    async with RemoteSessions("http://127.0.0.1:1", token="t" * 32) as remote:
        assert isinstance(remote, SessionControls)
    cluster = _pod_provider().sessions()
    assert snapshots_of(cluster) is cluster  # its workspace as an archive
    assert isinstance(AgentSandboxProvider(_pod_provider()).sessions(), SessionSnapshots)
    assert not isinstance(cluster, SessionControls)
    with pytest.raises(errors.ConfigError, match="k8s sessions cannot be extended") as caught:
        controls_of(cluster)
    assert "\n" not in str(caught.value)
    assert pause_controls_of(cluster) is cluster  # its pod goes, its workspace waits in the store
    with pytest.raises(errors.ConfigError) as caught:
        pause_controls_of(_Plain())  # type: ignore[arg-type]  # what a backend without pauses is told
    assert str(caught.value) == (
        "plain sessions cannot be paused: pause and idle suspend are for local (bubblewrap or gVisor), "
        "k8s and agent-sandbox sessions (or a `sandbox serve` of them)"
    )
    claims = AgentSandboxProvider(_pod_provider()).sessions()
    assert pause_controls_of(claims) is claims
    assert not isinstance(claims, SessionControls)
