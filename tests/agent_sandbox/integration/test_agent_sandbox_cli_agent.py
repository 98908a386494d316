"""``ironflow agent --backend agent-sandbox --provider sandbox.yaml PROMPT``: the step runs in a
sandbox claimed from the file's warm pool (or cold-started from its template) on the cluster
the file names, the answer goes to stdout, the claim is deleted, and every failure is one
``error:`` line with the documented exit code.

The Kubernetes test server runs in a thread (the CLI calls ``asyncio.run`` itself), the scripted
agent-sandbox controller on the server's loop. Execs run as local subprocesses standing in for
the container, as in ``test_agent_sandbox_provider.py``: the agent is a small ``claude`` stand-in
that records its arguments and prints output the real CLI printed (tests/fixtures/claude).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.unclosed import unclosed_after_collect
from typer.testing import CliRunner

from ironflow.agent_sandbox import claims
from ironflow.cli.app import app
from ironflow.kube import api as k8s
from ironflow.testing.agent_sandbox_controller import AgentSandboxController
from ironflow.testing.kube import local_exec
from ironflow.testing.polling import eventually_sync
from ironflow.testing.threaded_kube import ThreadedKube

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude"
ANSWER = json.loads((FIXTURES / "json_text.out").read_text())["result"]
NS = "agents"
TEMPLATE = "claude"
POOL = "claude-pool"
RES = claims.resources()


@dataclass
class Cluster:
    kube: ThreadedKube
    controller: AgentSandboxController
    tmp: Path
    claude: Path

    def provider_file(self, *, replicas: int = 1, ready_timeout: float = 10) -> Path:
        path = self.tmp / "sandbox.yaml"
        path.write_text(
            "pod:\n"
            "  image: ghcr.io/acme/claude-runner:2.1.332-1\n"
            "  sandboxed: true\n"
            f"  namespace: {NS}\n"
            f"  claude_path: {self.claude}\n"
            "  timeout_seconds: 20\n"
            "  cluster: {kubeconfig: kubeconfig.yaml, context: kube-test}\n"
            f"template: {TEMPLATE}\n"
            f"warm_pool: {POOL}\n"
            f"replicas: {replicas}\n"
            f"ready_timeout_seconds: {ready_timeout}\n"
        )
        return path

    def apply_template(self, provider: Path) -> None:
        """What a user runs first: the SandboxTemplate and SandboxWarmPool of the same file."""
        args = [
            "sandbox",
            "apply-template",
            "--provider",
            str(provider),
            "--kubeconfig",
            str(self.tmp / "kubeconfig.yaml"),
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == [f"sandboxtemplate/{TEMPLATE} created", f"sandboxwarmpool/{POOL} created"]

    def objects(self, resource: k8s.Resource) -> list[dict[str, Any]]:
        return self.kube.soon(lambda: self.kube.server.objects(resource, NS))

    def created_claims(self) -> list[dict[str, Any]]:
        history = self.kube.soon(lambda: list(self.kube.server.store.history))
        return [e.obj for e in history if e.kind == "ADDED" and e.obj.get("kind") == "SandboxClaim"]

    def step_sandboxes(self) -> list[str]:
        """Sandboxes bound to a claim (pool members waiting for one excluded)."""
        return [
            s["metadata"]["name"]
            for s in self.objects(RES.sandboxes)
            if any(r.get("kind") == "SandboxClaim" for r in s["metadata"].get("ownerReferences") or ())
        ]

    def nothing_left(self, *, members: int) -> bool:
        """No claim, no claimed Sandbox, and only the pool's members' pods."""
        return not self.objects(RES.claims) and not self.step_sandboxes() and len(self.objects(k8s.PODS)) == members

    def ready_members(self) -> list[str]:
        return [s["metadata"]["name"] for s in self.objects(RES.sandboxes) if claims.has_condition(s, "Ready")]

    def execs(self) -> list[Any]:
        return self.kube.soon(lambda: list(self.kube.server.execs))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    home = tmp_path / "home"
    home.mkdir()
    claude = tmp_path / "claude"
    claude.write_text(f"#!/bin/sh\necho \"$@\" > '{home}/args'\ncat '{FIXTURES / 'json_text.out'}'\n")
    claude.chmod(0o755)
    kube = ThreadedKube(namespaces=("default",))
    controller = kube.soon(lambda: AgentSandboxController(kube.server, namespace=NS, cold_start_s=0.05))
    try:
        (tmp_path / "kubeconfig.yaml").write_text(kube.kubeconfig_yaml())
        kube.soon(lambda: kube.server.serve_exec(local_exec({"HOME": str(home), "TMPDIR": str(tmp_path)})))
        kube.call(controller.start())
        yield Cluster(kube, controller, tmp_path, claude)
        assert not controller.failures, controller.failures
        assert not (errors := kube.soon(lambda: list(kube.server.internal_errors))), errors
    finally:
        try:
            kube.call(controller.stop())
        finally:
            kube.close()


def _agent(provider: Path, *args: str) -> Any:
    return CliRunner().invoke(app, ["agent", "--backend", "agent-sandbox", "--provider", str(provider), *args])


def test_answer_is_printed_from_a_warm_sandbox_of_the_files_pool_and_the_claim_is_deleted(cluster: Cluster) -> None:
    provider = cluster.provider_file(replicas=1)
    cluster.apply_template(provider)
    (member,) = eventually_sync(cluster.ready_members, what="a Ready warm-pool member")
    result = _agent(provider, "Say hello")
    assert result.exit_code == 0, result.output
    assert result.stdout == ANSWER + "\n"
    assert result.stderr == ""
    (claim,) = cluster.created_claims()
    assert claim["metadata"]["namespace"] == NS
    assert claim["spec"]["warmPoolRef"] == {"name": POOL}
    # The controller gave the claim the Ready member, and the agent ran in its pod.
    assert ("warm", claim["metadata"]["name"], member) in cluster.controller.events
    agent_exec = cluster.execs()[-1]
    assert (agent_exec.pod, agent_exec.exit_code) == (member, 0)
    assert "Say hello" in (cluster.tmp / "home" / "args").read_text()
    # The claim is gone with its Sandbox and pod; the pool keeps one (new) member.
    eventually_sync(lambda: cluster.nothing_left(members=1), what="no claim, no claimed sandbox, one pool pod")
    assert member not in [p["metadata"]["name"] for p in cluster.objects(k8s.PODS)]
    assert unclosed_after_collect() == []  # the CLI closed the API client it opened for the step


def test_cold_start_from_the_files_template_with_json_output(cluster: Cluster) -> None:
    """No warm members: the controller starts a Sandbox from the template the pool names."""
    provider = cluster.provider_file(replicas=0)
    cluster.apply_template(provider)
    result = _agent(provider, "Say hello", "-o", "json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["value"] == ANSWER
    assert answer["model"] == "claude-sonnet-5-5"
    (claim,) = cluster.created_claims()
    assert claim["spec"]["warmPoolRef"] == {"name": POOL}
    assert [e[:2] for e in cluster.controller.events] == [("cold", claim["metadata"]["name"])]
    history = cluster.kube.soon(lambda: list(cluster.kube.server.store.history))
    (sandbox,) = [e.obj for e in history if e.kind == "ADDED" and e.obj.get("kind") == "Sandbox"]
    assert sandbox["metadata"]["annotations"]["agents.x-k8s.io/sandbox-template-ref"] == TEMPLATE
    eventually_sync(lambda: cluster.nothing_left(members=0), what="no claim, no sandbox, no pod")


def test_a_failing_agent_is_a_failed_step_exit_1_and_the_claim_is_deleted(cluster: Cluster) -> None:
    cluster.claude.write_text("#!/bin/sh\necho 'boom' >&2\nexit 3\n")
    provider = cluster.provider_file(replicas=0)
    cluster.apply_template(provider)
    result = _agent(provider, "Say hello")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert result.stderr == "error: claude process exited with code 3: boom\n"
    assert cluster.execs()[-1].exit_code == 3
    eventually_sync(lambda: cluster.nothing_left(members=0), what="no claim, no sandbox, no pod")


def test_a_claim_never_ready_within_the_files_timeout_is_one_error_line_and_nothing_is_left(
    cluster: Cluster,
) -> None:
    cluster.kube.soon(lambda: setattr(cluster.controller, "stall", lambda claim: True))
    provider = cluster.provider_file(replicas=0, ready_timeout=1)
    cluster.apply_template(provider)
    started = time.monotonic()
    result = _agent(provider, "Say hello")
    took = time.monotonic() - started
    assert result.exit_code == 3, result.output  # the cluster could not give a sandbox: infrastructure
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: SandboxClaim '{claims.CLAIM_NAME_PREFIX}"), line
    assert "did not become Ready within 1s (Ready=False, reason DependenciesNotReady); it was deleted" in line
    assert 1 <= took < 10  # the file's 1 s, not the 120 s default
    assert cluster.created_claims()
    assert cluster.execs() == []
    eventually_sync(lambda: cluster.nothing_left(members=0), what="no claim, no sandbox, no pod")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "--backend agent-sandbox needs --provider provider.yaml (see docs/agent-sandbox.md)"),
        ("", "cannot read provider file"),
        ("pod: [\n", "is not valid YAML"),
        ("image: busybox\nsandboxed: true\n", "unknown key 'image'"),
        ("pod: {image: busybox}\n", "pod: must set 'sandboxed: true'"),
        ("pod: {image: busybox, sandboxed: true}\nready_timeout_seconds: soon\n", "ready_timeout_seconds: must be"),
        ("pod: {image: busybox, sandboxed: true}\nreplcas: 3\n", "unknown key 'replcas'; did you mean 'replicas'"),
    ],
)
def test_a_bad_or_missing_provider_file_is_exit_2_with_one_line(
    tmp_path: Path, content: str | None, words: str
) -> None:
    args = ["agent", "--backend", "agent-sandbox"]
    if content is not None:
        path = tmp_path / ("sandbox.yaml" if content else "missing.yaml")
        if content:
            path.write_text(content)
        args += ["--provider", str(path)]
    result = CliRunner().invoke(app, [*args, "Say hello"])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert words in result.stderr
    assert result.stderr.count("\n") == 1


def test_fake_model_is_refused_on_agent_sandbox_like_on_k8s(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.yaml"
    path.write_text("pod: {image: busybox, sandboxed: true}\n")
    result = CliRunner().invoke(
        app, ["agent", "--backend", "agent-sandbox", "--provider", str(path), "--fake-model", "hi"]
    )
    assert result.exit_code == 2
    assert result.stderr == "error: --fake-model runs only with --backend local\n"


def test_exec_on_agent_sandbox_is_refused_naming_the_backends_it_runs_on(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.yaml"
    path.write_text("pod: {image: busybox, sandboxed: true}\n")
    result = CliRunner().invoke(app, ["exec", "--backend", "agent-sandbox", "--provider", str(path), "--", "true"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: exec runs on --backend local or k8s; agent-sandbox runs agent steps only "
        "(ironflow agent --backend agent-sandbox)\n"
    )
