"""``ironflow sandbox serve --backend agent-sandbox`` on the real kube-apiserver with the real
agent-sandbox controller (kwok runs the pods; each exec runs on this host in the test's work
dir): the upstream SDK's ``commands.run`` and ``files.write/read/list/exists`` through it, and a
restarted serve that routes, lists and closes the claim the previous one opened (skipped with
the reason when the tier's binaries are not built)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.fakes.agent_sandbox_gc import wait_for_claim_cascade
from tests.sessions.integration.serving import TOKEN, Served, cli_env, ironflow, start_serve
from tests.sessions.integration.upstream_sdk import direct_config, upstream_sandbox

from ironflow.agent_sandbox import claims
from ironflow.testing.kubeenv import KubeEnv


@dataclass
class Tier:
    env: KubeEnv
    namespace: str
    provider: Path
    work: Path

    def claims(self) -> list[str]:
        res = claims.resources().claims
        path = f"/apis/{res.group}/{res.version}/namespaces/{self.namespace}/{res.plural}"
        return sorted(c["metadata"]["name"] for c in self.env.request("GET", path).get("items", []))


@pytest.fixture
def tier(kube_env: KubeEnv, tmp_path: Path) -> Iterator[Tier]:
    work = tmp_path / "work"
    work.mkdir()
    with kube_env.namespace(f"as-serve-{uuid.uuid4().hex[:8]}") as namespace:
        wait_for_claim_cascade(kube_env, namespace)
        kube_env.allow_exec(namespace, work)
        provider = tmp_path / "agent-sandbox.yaml"
        provider.write_text(
            f"pod:\n  image: runner:test\n  sandboxed: true\n  namespace: {namespace}\n"
            f"  cluster: {{kubeconfig: {kube_env.kubeconfig_path}}}\nreplicas: 1\nready_timeout_seconds: 60\n"
        )
        applied = ironflow("sandbox", "apply-template", "--provider", str(provider), env=cli_env())
        assert applied.returncode == 0, applied.stderr
        yield Tier(kube_env, namespace, provider, work)


def _stop(served: Served) -> None:
    try:
        assert served.stop() == 0
    finally:
        for stream in (served.proc.stdout, served.proc.stderr):
            if stream is not None:
                stream.close()


def _eventually_no_claims(tier: Tier) -> None:
    deadline = time.monotonic() + 30
    while tier.claims() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tier.claims() == []


def test_realkube_the_upstream_sdk_and_a_restarted_serve_through_agent_sandbox_serve(tier: Tier) -> None:
    env = cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN)
    args = ("--backend", "agent-sandbox", "--provider", str(tier.provider))
    first = start_serve(env, *args, "--keep-sessions")
    try:
        opened = ironflow("sandbox", "open", "--backend", "agent-sandbox", "-o", "json", env=first.env, timeout=120)
        assert opened.returncode == 0, opened.stderr
        info = json.loads(opened.stdout)
        sid = info["id"]
        assert info["backend"] == "agent-sandbox"
        assert tier.claims() == [sid]
        config = direct_config(first.url, TOKEN)
        with upstream_sandbox(config, sid) as sandbox:
            result = sandbox.commands.run("sh -c 'echo from-sdk; echo oops >&2; exit 3'")
            assert (result.stdout, result.stderr, result.exit_code) == ("from-sdk\n", "oops\n", 3)
            sandbox.files.write("notes/hello.txt", b"written by the SDK")
            assert (tier.work / "notes" / "hello.txt").read_bytes() == b"written by the SDK"  # in the "pod"
            assert sandbox.files.read("notes/hello.txt") == b"written by the SDK"
            assert [(e.name, e.type, e.size) for e in sandbox.files.list("notes")] == [("hello.txt", "file", 18)]
            assert sandbox.files.exists("notes/hello.txt")
            assert not sandbox.files.exists("notes/missing.txt")
    finally:
        _stop(first)
    assert tier.claims() == [sid]  # --keep-sessions: the claim lives on to its TTL

    second = start_serve(env, *args)
    try:
        listed = ironflow("sandbox", "ls", "-o", "json", env=second.env)
        assert listed.returncode == 0, listed.stderr
        assert [s["id"] for s in json.loads(listed.stdout)] == [sid]
        with upstream_sandbox(direct_config(second.url, TOKEN), sid) as sandbox:
            again = sandbox.commands.run("cat notes/hello.txt")
            assert (again.stdout, again.exit_code) == ("written by the SDK", 0)
        ran = ironflow("sandbox", "exec", sid, "--", "sh", "-c", "echo through-b", env=second.env)
        assert (ran.returncode, ran.stdout) == (0, "through-b\n"), ran.stderr
        closed = ironflow("sandbox", "close", sid, env=second.env)
        assert (closed.returncode, closed.stdout.strip()) == (0, f"closed {sid}"), closed.stderr
        _eventually_no_claims(tier)
    finally:
        _stop(second)
