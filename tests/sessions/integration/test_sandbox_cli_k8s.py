"""``ironflow sandbox`` on a Kubernetes cluster: ``--provider FILE`` talks to the file's cluster
(the test server, in a thread; ``local_exec`` runs each exec here in the test's work dir) with
no server between: open prints the id, exec streams and exits with the command's code, cp moves
files and directories both ways, ls lists the namespace's session pods, close deletes the pod.
And ``sandbox serve --backend k8s``: the same commands and the upstream SDK through it. Every
bad input is one line, exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.sessions.integration.serving import TOKEN, Served, cli_env, ironflow, start_serve
from tests.sessions.integration.upstream_sdk import direct_config, upstream_sandbox
from typer.testing import CliRunner

from ironflow.cli.app import app
from ironflow.kube import api as k8s
from ironflow.testing.kube import PodScript, local_exec
from ironflow.testing.polling import eventually_sync
from ironflow.testing.threaded_kube import ThreadedKube

NS = "agents"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ThreadedKube, Path, Path]]:
    """The test server in a thread, its provider file, and the dir every exec runs in."""
    work = tmp_path / "work"
    work.mkdir()
    st = ThreadedKube(namespaces=("default", NS))
    st.soon(lambda: st.server.serve_exec(local_exec(cwd=str(work))))
    st.soon(lambda: st.server.script_pods(PodScript(name_prefix="sbx-", run_for=None)))
    (tmp_path / "kubeconfig.yaml").write_text(st.kubeconfig_yaml())
    provider = tmp_path / "provider.yaml"
    provider.write_text(
        f"image: runner:1\nnamespace: {NS}\npod_labels: {{team: infra}}\n"
        "cluster: {kubeconfig: kubeconfig.yaml, context: kube-test}\n"
    )
    try:
        yield st, provider, work
    finally:
        st.close()


def _pods(st: ThreadedKube) -> list[str]:
    return sorted(p["metadata"]["name"] for p in st.objects(k8s.PODS, NS))


def test_open_exec_cp_ls_close_through_the_provider_file(
    cluster: tuple[ThreadedKube, Path, Path], tmp_path: Path
) -> None:
    st, provider, _ = cluster
    opened = CliRunner().invoke(app, ["sandbox", "open", "--provider", str(provider), "--ttl", "10m", "-o", "json"])
    assert opened.exit_code == 0, opened.output
    info = json.loads(opened.stdout)
    sid = info["id"]
    assert (info["backend"], info["labels"]) == ("k8s", {})
    assert _pods(st) == [sid]  # the pod outlives the CLI that opened it
    pod = st.soon(lambda: st.server.get_object(k8s.PODS, NS, sid))
    assert pod is not None
    assert pod["metadata"]["labels"]["team"] == "infra"
    assert pod["spec"]["automountServiceAccountToken"] is False

    ran = CliRunner().invoke(
        app, ["sandbox", "exec", sid, "--provider", str(provider), "--env", "A=1", "--", "sh", "-c", "echo $A; exit 4"]
    )
    assert (ran.exit_code, ran.stdout) == (4, "1\n"), ran.output
    slow = CliRunner().invoke(
        app, ["sandbox", "exec", sid, "--provider", str(provider), "--timeout", "0.3", "--", "sleep", "9"]
    )
    assert slow.exit_code == 1
    assert slow.stderr.startswith("error: timed out")

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "x.txt").write_text("x")
    up = CliRunner().invoke(app, ["sandbox", "cp", "--provider", str(provider), str(tree), f"{sid}:copied"])
    assert up.exit_code == 0, up.output
    back = tmp_path / "back.txt"
    down = CliRunner().invoke(app, ["sandbox", "cp", "--provider", str(provider), f"{sid}:copied/sub/x.txt", str(back)])
    assert down.exit_code == 0, down.output
    assert back.read_text() == "x"

    listed = CliRunner().invoke(app, ["sandbox", "ls", "--provider", str(provider), "-o", "json"])
    assert [i["id"] for i in json.loads(listed.stdout)] == [sid]
    closed = CliRunner().invoke(app, ["sandbox", "close", sid, "--provider", str(provider)])
    assert (closed.exit_code, closed.stdout.strip()) == (0, f"closed {sid}")
    assert _pods(st) == []
    again = CliRunner().invoke(app, ["sandbox", "exec", sid, "--provider", str(provider), "--", "true"])
    assert again.exit_code == 2
    assert again.stderr.strip() == f"error: no open sandbox session '{sid}' in {NS}"


def test_snapshot_open_from_fork_and_rm_through_the_provider_file(
    cluster: tuple[ThreadedKube, Path, Path], tmp_path: Path
) -> None:
    """The workspace as an archive in this machine's store: it outlives the session's pod."""
    st, provider, work = cluster
    env = {"IRONFLOW_SANDBOX_SERVER": "", "IRONFLOW_SNAPSHOT_DIR": str(tmp_path / "store")}

    def cli(*args: str) -> str:
        result = CliRunner().invoke(app, ["sandbox", *args, "--provider", str(provider)], env=env)
        assert result.exit_code == 0, result.output
        return result.stdout.strip()

    sid = cli("open", "--ttl", "10m")
    (work / "run.sh").write_text("echo ran\n")
    (work / "run.sh").chmod(0o750)
    snap = cli("snapshot", sid, "--name", "first")
    assert snap.startswith("snap-")
    cli("close", sid)
    (work / "run.sh").unlink()
    again = cli("open", "--from", snap)
    assert (work / "run.sh").read_text() == "echo ran\n"
    assert (work / "run.sh").stat().st_mode & 0o777 == 0o750
    forks = cli("fork", again, "--count", "2").splitlines()
    assert len(forks) == 2
    assert sorted(_pods(st)) == sorted([again, *forks])
    listed = json.loads(cli("snapshots", "-o", "json"))
    assert [(s["id"], s["name"], s["isolation"]) for s in listed][:1] == [(snap, "first", "k8s")]
    assert [s["name"] for s in listed][1:] == [f"fork-of-{again}"]
    assert cli("snapshot", "rm", snap) == f"removed {snap}"
    for session_id in [again, *forks]:
        cli("close", session_id)
    assert _pods(st) == []


def test_pause_and_unpause_by_id_through_the_provider_file(
    cluster: tuple[ThreadedKube, Path, Path], tmp_path: Path
) -> None:
    """One CLI process pauses (the pod goes, the workspace waits in this machine's store), the next
    lists it paused, an exec resumes it first, unpause brings it back after another pause."""
    st, provider, work = cluster
    env = {"IRONFLOW_SANDBOX_SERVER": "", "IRONFLOW_SNAPSHOT_DIR": str(tmp_path / "store")}

    def cli(*args: str) -> str:
        result = CliRunner().invoke(app, ["sandbox", *args[:1], "--provider", str(provider), *args[1:]], env=env)
        assert result.exit_code == 0, result.output
        return result.stdout.strip()

    sid = cli("open", "--ttl", "10m")
    (work / "kept.txt").write_text("kept")
    assert json.loads(cli("pause", sid, "-o", "json"))["paused"] is True
    assert _pods(st) == []
    assert [(i["id"], i["paused"]) for i in json.loads(cli("ls", "-o", "json"))] == [(sid, True)]
    (work / "kept.txt").unlink()  # the pod's files went with it
    assert cli("exec", sid, "--", "cat", "kept.txt") == "kept"
    assert _pods(st) == [sid]
    cli("pause", sid)
    assert json.loads(cli("unpause", sid, "-o", "json"))["paused"] is False
    assert _pods(st) == [sid]
    cli("close", sid)
    assert (_pods(st), json.loads(cli("snapshots", "-o", "json"))) == ([], [])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["open", "--backend", "bogus"], "'bogus' is not one of 'local', 'k8s', 'agent-sandbox'"),
        (["open", "--backend", "agent-sandbox"], "--backend agent-sandbox needs --provider provider.yaml"),
        (["open", "--backend", "agent-sandbox", "--provider", "{provider}"], "unknown key 'image'"),
        (["open", "--backend", "k8s"], "--backend k8s needs --provider provider.yaml"),
        (["open", "--backend", "local", "--provider", "{provider}"], "--provider is for --backend k8s"),
        (["open", "--provider", "{provider}", "--idle-timeout", "5m"], "--idle-timeout needs a server"),
        (["open", "--provider", "{provider}", "--ttl", "soon"], "invalid duration 'soon'"),
        (["open", "--provider", "{provider}", "--label", "app.kubernetes.io/component=x"], "reserved"),
        (["open", "--provider", "{provider}", "--workspace", "{tmp}"], "cannot see this machine's directories"),
        (["open", "--provider", "{provider}", "--workspace", "https://git.example.test/o/r.git"], "IRONFLOW_GIT_TOKEN"),
        (["diff", "--provider", "{provider}", "sbx-0000000000000000"], "no open sandbox session"),
        (["ls", "--provider", "{missing}"], "missing.yaml"),
        (["snapshot", "--provider", "{provider}", "sbx-0000000000000000"], "no open sandbox session 'sbx-0000"),
        (["fork", "--provider", "{provider}", "sbx-0000000000000000"], "no open sandbox session 'sbx-0000"),
        (["snapshot", "--provider", "{provider}", "sbx-0000000000000000", "--name", "-x"], "a snapshot name is"),
        (["pause", "--provider", "{provider}", "sbx-0000000000000000"], "no open sandbox session 'sbx-0000"),
        (["unpause", "--provider", "{provider}", "sbx-0000000000000000"], "no open sandbox session 'sbx-0000"),
        (["extend", "--provider", "{provider}", "sbx-0000000000000000", "--ttl", "1h"], "cannot be extended yet"),
        (["open", "--provider", "{provider}", "--from", "snap-0000000000000000"], "no snapshot 'snap-0000"),
        (["open", "--provider", "{provider}", "--idle-suspend", "5m"], "--idle-suspend needs a server"),
        (["serve", "--backend", "k8s"], "--backend k8s needs --provider provider.yaml"),
        (["serve", "--backend", "nope"], "invalid value for '--backend': 'nope' is not one of"),
        (["serve", "--provider", "{provider}"], "--provider is for --backend k8s"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    cluster: tuple[ThreadedKube, Path, Path], tmp_path: Path, args: list[str], message: str
) -> None:
    _, provider, _ = cluster
    filled = [a.format(provider=provider, missing=tmp_path / "missing.yaml", tmp=tmp_path) for a in args]
    result = CliRunner().invoke(app, ["sandbox", *filled], env={"IRONFLOW_SANDBOX_SERVER": ""})
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert message in lines[0]


def test_serve_backend_k8s_serves_the_cli_and_the_upstream_sdk(cluster: tuple[ThreadedKube, Path, Path]) -> None:
    st, provider, work = cluster
    served = start_serve(cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN), "--backend", "k8s", "--provider", str(provider))
    try:
        refused = ironflow("sandbox", "open", "--backend", "local", env=served.env)
        assert refused.returncode == 2
        assert "this server serves k8s sessions, not local" in refused.stderr
        opened = ironflow("sandbox", "open", "--backend", "k8s", "-o", "json", env=served.env)
        assert opened.returncode == 0, opened.stderr
        sid = json.loads(opened.stdout)["id"]
        assert _pods(st) == [sid]
        with upstream_sandbox(direct_config(served.url, TOKEN), sid) as sandbox:
            result = sandbox.commands.run("sh -c 'echo from-sdk; echo oops >&2; exit 3'")
            assert (result.stdout, result.stderr, result.exit_code) == ("from-sdk\n", "oops\n", 3)
            sandbox.files.write("notes/hello.txt", b"written by the SDK")
            assert (work / "notes" / "hello.txt").read_bytes() == b"written by the SDK"  # in the "pod"
            assert sandbox.files.read("notes/hello.txt") == b"written by the SDK"
            assert [(e.name, e.type, e.size) for e in sandbox.files.list("notes")] == [("hello.txt", "file", 18)]
            assert sandbox.files.exists("notes/hello.txt")
            assert not sandbox.files.exists("notes/missing.txt")
        ran = ironflow("sandbox", "exec", sid, "--", "cat", "notes/hello.txt", env=served.env)
        assert (ran.returncode, ran.stdout) == (0, "written by the SDK")
        closed = ironflow("sandbox", "close", sid, env=served.env)
        assert closed.returncode == 0, closed.stderr
        assert _pods(st) == []
        kept = ironflow("sandbox", "open", "-o", "json", env=served.env)
        assert kept.returncode == 0, kept.stderr
        assert len(_pods(st)) == 1
    finally:
        assert served.stop() == 0
        for stream in (served.proc.stdout, served.proc.stderr):
            if stream is not None:
                stream.close()
    assert _pods(st) == []  # SIGTERM closed every session the server held


def test_serve_backend_k8s_snapshots_forks_and_opens_from_a_snapshot(
    cluster: tuple[ThreadedKube, Path, Path], tmp_path: Path
) -> None:
    """The server's snapshot endpoints over a cluster backend; a paused session's next exec resumes it."""
    st, provider, work = cluster
    env = cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN, IRONFLOW_SNAPSHOT_DIR=str(tmp_path / "store"))
    served = start_serve(env, "--backend", "k8s", "--provider", str(provider))

    def cli(*args: str) -> str:
        result = ironflow("sandbox", *args, env=served.env)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    try:
        sid = cli("open")
        (work / "kept.txt").write_text("kept")
        snap = cli("snapshot", sid)
        forks = cli("fork", sid, "--count", "2").splitlines()
        assert sorted(_pods(st)) == sorted([sid, *forks])
        cli("pause", sid)
        assert sid not in _pods(st)
        (work / "kept.txt").unlink()  # the pod's files went with it
        assert cli("exec", sid, "--", "cat", "kept.txt") == "kept"  # resumed first, from its archive
        assert sid in _pods(st)
        idle = cli("open", "--idle-suspend", "1s")
        (work / "idle.txt").write_text("idle")
        eventually_sync(lambda: idle not in _pods(st), limit_s=30, interval_s=0.2, what="the idle session suspended")
        (work / "idle.txt").unlink()
        assert cli("exec", idle, "--", "cat", "idle.txt") == "idle"  # the next request resumes it
        cli("close", idle)
        cli("close", sid)
        (work / "kept.txt").unlink()
        cli("open", "--from", snap)
        assert (work / "kept.txt").read_text() == "kept"
        assert len(json.loads(cli("snapshots", "-o", "json"))) == 2  # its own and the forks' base
    finally:
        assert served.stop() == 0
        for stream in (served.proc.stdout, served.proc.stderr):
            if stream is not None:
                stream.close()
    assert _pods(st) == []


def test_a_restarted_serve_routes_lists_and_closes_the_sessions_the_previous_one_opened(
    cluster: tuple[ThreadedKube, Path, Path],
) -> None:
    st, provider, work = cluster
    env = cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN)
    first = start_serve(env, "--backend", "k8s", "--provider", str(provider), "--keep-sessions")
    try:
        opened = ironflow("sandbox", "open", "-o", "json", env=first.env)
        assert opened.returncode == 0, opened.stderr
        sid = json.loads(opened.stdout)["id"]
        wrote = ironflow("sandbox", "exec", sid, "--", "sh", "-c", "echo kept > note", env=first.env)
        assert wrote.returncode == 0, wrote.stderr
    finally:
        assert first.stop() == 0
        _close_streams(first)
    assert _pods(st) == [sid]  # --keep-sessions: SIGTERM let go of the session, the pod lives on
    second = start_serve(env, "--backend", "k8s", "--provider", str(provider))
    try:
        listed = ironflow("sandbox", "ls", "-o", "json", env=second.env)
        assert listed.returncode == 0, listed.stderr
        assert [s["id"] for s in json.loads(listed.stdout)] == [sid]
        ran = ironflow("sandbox", "exec", sid, "--", "cat", "note", env=second.env)
        assert (ran.returncode, ran.stdout) == (0, "kept\n"), ran.stderr
        with upstream_sandbox(direct_config(second.url, TOKEN), sid) as sandbox:
            assert sandbox.commands.run("cat note").stdout == "kept\n"
        assert (work / "note").read_text() == "kept\n"
        closed = ironflow("sandbox", "close", sid, env=second.env)
        assert (closed.returncode, closed.stdout.strip()) == (0, f"closed {sid}"), closed.stderr
        assert _pods(st) == []
        gone = ironflow("sandbox", "exec", sid, "--", "true", env=second.env)
        assert gone.returncode != 0
    finally:
        assert second.stop() == 0
        _close_streams(second)


def test_keep_sessions_is_refused_for_local_sessions_but_bubblewrap_s() -> None:
    env = cli_env(IRONFLOW_SANDBOX_TOKEN=TOKEN)
    refused = ironflow("sandbox", "serve", "--keep-sessions", "--isolation", "gvisor", env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: --keep-sessions for local sessions needs --isolation bwrap: gvisor sessions die with serve"
    ]


def _close_streams(served: Served) -> None:
    for stream in (served.proc.stdout, served.proc.stderr):
        if stream is not None:
            stream.close()
