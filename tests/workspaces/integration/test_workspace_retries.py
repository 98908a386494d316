"""A retried step's workspace, on the local backend in a real sandbox (bubblewrap, gVisor): by default each attempt
starts from the source; with ``keep_on_retry`` the next attempt of the same step starts from the
tree the failed one left, its patch still relative to the source; a success or ``release_run``
removes what was kept. The agent is a stand-in ``claude`` that fails its first attempt."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fakes.local_sandbox import WORKSPACE_ISOLATIONS

from ironflow import errors
from ironflow.engine import model
from ironflow.engine.runner import Runner
from ironflow.engine.sqlite import SqliteStore
from ironflow.engine.worker import Worker
from ironflow.local.sandbox.environment import Isolation
from ironflow.local.sandbox_provider import LocalSandboxProvider, ProxyCredential
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig
from ironflow.workspaces import Workspace

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git not installed"),
]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
JSON_TEXT = (FIXTURES / "json_text.out").read_text()
RUN = "01a0e906-1f85-7000-8000-00000000retr"
#: Each attempt notes itself; the first (one line in the file) fails, as a crashed agent would.
AGENT = f"""#!/bin/sh
echo attempt >> /workspace/attempts.txt
if [ "$(wc -l < /workspace/attempts.txt)" -lt 2 ]; then echo 'first attempt fails' >&2; exit 1; fi
cat <<'EOF'
{JSON_TEXT.rstrip()}
EOF
"""


@pytest.fixture(params=WORKSPACE_ISOLATIONS)
def isolation(request: pytest.FixtureRequest) -> Isolation:
    """Each test runs under both runtimes."""
    chosen: Isolation = request.param
    return chosen


@pytest.fixture
def agent_dir(isolation: Isolation) -> Iterator[Path]:
    """Where the stand-in agent lives: the sandbox shows its directory at the same path, so
    not under /tmp (either sandbox's own), nor under /var/tmp for gVisor (its own too; as root, /var/lib)."""
    place = Path(tempfile.mkdtemp(prefix="ifl-agent-", dir="/var/tmp" if isolation == "bwrap" else "/var/lib"))
    place.chmod(0o755)  # the sandbox runs as another uid on a root worker
    yield place
    shutil.rmtree(place, ignore_errors=True)


def provider(tmp_path: Path, agent_dir: Path, isolation: Isolation) -> LocalSandboxProvider:
    claude = agent_dir / "claude"
    claude.write_text(AGENT)
    claude.chmod(0o755)
    temp = tmp_path / "temp"
    temp.mkdir()
    return LocalSandboxProvider(
        isolation=isolation,
        timeout=60,
        credential=ProxyCredential(Secret("sk-ant-api03-retry-test"), "api_key", "http://127.0.0.1:9"),
        claude_path=str(claude),
        temp_dir=str(temp),
    )


def source(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("x = 1\n")
    return repo


def kept_dirs(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "temp").iterdir() if p.name.startswith("ironflow-kept-"))


async def test_by_default_a_retry_starts_from_the_source(tmp_path: Path, agent_dir: Path, isolation: Isolation) -> None:
    p = provider(tmp_path, agent_dir, isolation)
    config = AgentConfig("fix", workspace=Workspace(str(source(tmp_path)))).scoped(RUN, "fix")
    for _ in range(2):  # the second attempt sees a fresh copy: one line again, so it fails too
        with pytest.raises(errors.ProcessFailed, match="first attempt fails"):
            await p.run(config)
    assert kept_dirs(tmp_path) == []


async def test_keep_on_retry_starts_the_next_attempt_from_the_failed_ones_tree(
    tmp_path: Path, agent_dir: Path, isolation: Isolation
) -> None:
    p = provider(tmp_path, agent_dir, isolation)
    repo = source(tmp_path)
    config = AgentConfig("fix", workspace=Workspace(str(repo), keep_on_retry=True)).scoped(RUN, "fix")
    with pytest.raises(errors.ProcessFailed):
        await p.run(config)
    assert len(kept_dirs(tmp_path)) == 1
    result = await p.run(config)  # the engine's retry: the same scoped config
    assert result.text == "Hello from the fake model."
    assert result.workspace is not None
    assert result.workspace.changed_paths == ("attempts.txt",)
    assert b"+attempt\n+attempt\n" in result.workspace.patch  # relative to the source: both attempts
    assert not (repo / "attempts.txt").exists()  # the host tree is never written
    assert kept_dirs(tmp_path) == []  # a success removes what was kept


async def test_another_step_or_run_does_not_get_the_kept_tree_and_release_run_removes_it(
    tmp_path: Path, agent_dir: Path, isolation: Isolation
) -> None:
    p = provider(tmp_path, agent_dir, isolation)
    spec = Workspace(str(source(tmp_path)), keep_on_retry=True)
    with pytest.raises(errors.ProcessFailed):
        await p.run(AgentConfig("fix", workspace=spec).scoped(RUN, "fix"))
    with pytest.raises(errors.ProcessFailed):  # another step starts afresh, and fails its own first attempt
        await p.run(AgentConfig("fix", workspace=spec).scoped(RUN, "other"))
    assert len(kept_dirs(tmp_path)) == 2
    await p.release_run(RUN)
    assert kept_dirs(tmp_path) == []
    with pytest.raises(errors.ProcessFailed):  # released: the step starts from the source again
        await p.run(AgentConfig("fix", workspace=spec).scoped(RUN, "fix"))
    await p.release_run(RUN)


def test_a_step_file_names_keep_on_retry_and_a_pod_refuses_it() -> None:
    config = AgentConfig.from_dict({"prompt": "p", "workspace": {"source": "/repo", "keep_on_retry": True}})
    assert config.workspace == Workspace("/repo", keep_on_retry=True)
    assert AgentConfig.from_dict(config.to_dict()) == config
    from ironflow.k8s import K8sEphemeralProvider

    git = Workspace("https://github.com/org/repo.git", keep_on_retry=True)
    with pytest.raises(errors.StepConfigError, match="keep_on_retry needs the local backend or a pvc"):
        K8sEphemeralProvider("img").auth_proxy("http://proxy:1").manifests(AgentConfig("p", workspace=git), now=1)


@pytest.mark.parametrize("keep", [True, False])
async def test_the_engines_retry_of_a_step_keeps_its_tree_only_when_asked(
    tmp_path: Path, agent_dir: Path, isolation: Isolation, keep: bool
) -> None:
    """Through the engine (a workflow whose step is retried once): with keep_on_retry the retry
    sees the first attempt's note and succeeds; without, it starts afresh and fails again."""
    store = SqliteStore(tmp_path / "engine.db")
    await store.open()
    try:
        run_id = model.new_id()
        workflow = f"{Path(__file__).parent / 'workspace_workflows.py'}:retried_fix"
        given = {"repo": str(source(tmp_path)), "keep": keep}
        await store.create_run(model.RunRecord(id=run_id, workflow=workflow, input=given))
        p = provider(tmp_path, agent_dir, isolation)
        worker = Worker(store, lambda run: Runner(store, p, requeue_delay=lambda attempt: 0.0), lease_s=5)
        await worker.run(until_idle=True)
        run = await store.get_run(run_id)
        assert run is not None
        (step,) = await store.steps(run_id)
    finally:
        await store.close()
    assert step.attempts == 2
    if keep:
        assert run.status is model.RunStatus.SUCCEEDED
        assert run.output["changed"] == ["attempts.txt"]
        assert "+attempt\n+attempt\n" in run.output["patch"]
    else:
        assert run.status is model.RunStatus.FAILED
    assert kept_dirs(tmp_path) == []  # nothing is left kept after the run


async def test_past_its_limit_the_provider_drops_the_oldest_kept_workspace(
    tmp_path: Path, agent_dir: Path, isolation: Isolation
) -> None:
    p = provider(tmp_path, agent_dir, isolation)
    p.kept.limit = 2
    spec = Workspace(str(source(tmp_path)), keep_on_retry=True)
    for step in ("a", "b", "c"):
        with pytest.raises(errors.ProcessFailed):
            await p.run(AgentConfig("fix", workspace=spec).scoped(RUN, step))
    assert len(kept_dirs(tmp_path)) == 2
    assert len(p.kept) == 2
    result = await p.run(AgentConfig("fix", workspace=spec).scoped(RUN, "c"))  # the newest was kept
    assert result.workspace is not None
    with pytest.raises(errors.ProcessFailed):  # the oldest was dropped: "a" starts afresh
        await p.run(AgentConfig("fix", workspace=spec).scoped(RUN, "a"))
    await p.release_run(RUN)
    assert kept_dirs(tmp_path) == []
