"""``ironflow sandbox serve|open|exec|cp|ls|close`` as a user runs them: real processes, a real
server, real bubblewrap. Every failure is one ``error:`` line with the documented exit code."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tests.sessions.integration.serving import (
    CLI,
    TOKEN,
    Served,
    cli_env,
    ironflow,
    start_serve,
)

from ironflow.testing.processes import descendants, running

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def _one_error_line(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert text in lines[0], lines[0]
    assert "Traceback" not in done.stderr


def _open(served: Served, *args: str) -> str:
    done = ironflow("sandbox", "open", *args, env=served.env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_open_exec_ls_and_close(served: Served) -> None:
    sandbox_id = _open(served, "--ttl", "10m", "--label", "team=a")
    assert sandbox_id.startswith("sbx-")
    doc = json.loads(ironflow("sandbox", "open", "-o", "json", env=served.env).stdout)
    assert set(doc) >= {"id", "backend", "expires_at", "labels"}
    listed = json.loads(ironflow("sandbox", "ls", "-o", "json", env=served.env).stdout)
    assert sorted(s["id"] for s in listed) == sorted([sandbox_id, doc["id"]])
    assert next(s for s in listed if s["id"] == sandbox_id)["labels"] == {"team": "a"}
    as_yaml = ironflow("sandbox", "ls", "-o", "yaml", env=served.env).stdout  # it printed the table (issue 17)
    assert yaml.safe_load(as_yaml) == listed
    table = ironflow("sandbox", "ls", env=served.env).stdout
    assert sandbox_id in table
    assert "team=a" in table

    done = ironflow("sandbox", "exec", sandbox_id, "--", "sh", "-c", "echo out; echo err >&2; exit 5", env=served.env)
    assert (done.returncode, done.stdout, done.stderr) == (5, "out\n", "err\n")
    done = ironflow(
        "sandbox", "exec", sandbox_id, "--env", "A=1", "--cwd", "sub", "--", "sh", "-c", "echo $A; pwd", env=served.env
    )
    assert done.returncode != 0, "the working directory must exist"
    ironflow("sandbox", "exec", sandbox_id, "--", "mkdir", "sub", env=served.env)
    done = ironflow(
        "sandbox", "exec", sandbox_id, "--env", "A=1", "--cwd", "sub", "--", "sh", "-c", "echo $A; pwd", env=served.env
    )
    assert (done.returncode, done.stdout) == (0, "1\n/home/claude/sub\n")
    slow = ironflow("sandbox", "exec", sandbox_id, "--timeout", "0.5", "--", "sleep", "30", env=served.env)
    _one_error_line(slow, 1, "timed out")

    closed = ironflow("sandbox", "close", sandbox_id, env=served.env)
    assert (closed.returncode, closed.stdout) == (0, f"closed {sandbox_id}\n")
    again = ironflow("sandbox", "close", sandbox_id, env=served.env)
    _one_error_line(again, 2, f"no open sandbox session '{sandbox_id}'")
    _one_error_line(ironflow("sandbox", "exec", sandbox_id, "--", "true", env=served.env), 2, "no open sandbox")
    everything = ironflow("sandbox", "close", "--all", env=served.env)
    assert (everything.returncode, everything.stdout) == (0, f"closed {doc['id']}\n")
    assert json.loads(ironflow("sandbox", "ls", "-o", "json", env=served.env).stdout) == []


def test_exec_streams_output_as_it_comes(served: Served) -> None:
    sandbox_id = _open(served)
    argv = [*CLI, "sandbox", "exec", sandbox_id, "--", "sh", "-c", "echo first; sleep 3; echo second"]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=served.env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with proc.stdout:
        assert proc.stdout.readline() == "first\n"
        assert time.monotonic() - started < 2.9, "the first line came before the command ended"
        assert proc.stdout.readline() == "second\n"
    assert proc.wait(timeout=30) == 0


def test_ctrl_c_of_exec_kills_the_command_in_the_session(served: Served) -> None:
    """Ctrl-C: one line, exit 130, and the command is killed, not left running in the session."""
    sandbox_id = _open(served)
    script = "echo started; sleep 2; touch outlived"
    proc = subprocess.Popen(
        [*CLI, "sandbox", "exec", sandbox_id, "--", "sh", "-c", script],
        env=served.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (130, "error: interrupted\n")
    time.sleep(3)
    left = ironflow("sandbox", "exec", sandbox_id, "--", "test", "-e", "outlived", env=served.env)
    assert left.returncode == 1, "the command ran on after its caller's Ctrl-C"


def test_cp_files_and_directories_both_ways(served: Served, tmp_path: Path) -> None:
    sandbox_id = _open(served)
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "x.txt").write_text("x")
    (tmp_path / "tree" / "node_modules" / "pkg").mkdir(parents=True)
    (tmp_path / "tree" / "node_modules" / "pkg" / "bin.js").write_text("js")
    (tmp_path / "tree" / "node_modules" / ".bin").mkdir()
    (tmp_path / "tree" / "node_modules" / ".bin" / "x").symlink_to("../pkg/bin.js")
    (tmp_path / "tree" / "sub" / "lib.so").symlink_to("x.txt")
    (tmp_path / "file.txt").write_bytes(b"\x00binary\xff" * 1000)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert ironflow("sandbox", "cp", "file.txt", f"{sandbox_id}:in/", env=served.env).returncode == 0
        assert ironflow("sandbox", "cp", "tree", f"{sandbox_id}:copied", env=served.env).returncode == 0
        assert ironflow("sandbox", "cp", f"{sandbox_id}:in/file.txt", "back.txt", env=served.env).returncode == 0
        assert ironflow("sandbox", "cp", f"{sandbox_id}:copied", "out", env=served.env).returncode == 0
        inside = "readlink copied/node_modules/.bin/x copied/sub/lib.so; cat copied/node_modules/.bin/x"
        seen = ironflow("sandbox", "exec", sandbox_id, "--", "sh", "-c", inside, env=served.env)
        assert seen.stdout == "../pkg/bin.js\nx.txt\njs", "links arrive in the session as links"
        _one_error_line(ironflow("sandbox", "cp", f"{sandbox_id}:nope", "x", env=served.env), 2, "no such file")
        _one_error_line(ironflow("sandbox", "cp", f"{sandbox_id}:../../etc/passwd", "x", env=served.env), 2, "denied")
        _one_error_line(ironflow("sandbox", "cp", "a", "b", env=served.env), 2, "use SRC ID:DST or ID:SRC DST")
        _one_error_line(ironflow("sandbox", "cp", "missing", f"{sandbox_id}:x", env=served.env), 2, "no such file")
    finally:
        os.chdir(cwd)
    assert (tmp_path / "back.txt").read_bytes() == (tmp_path / "file.txt").read_bytes()
    assert (tmp_path / "out" / "sub" / "x.txt").read_text() == "x"
    assert os.readlink(tmp_path / "out" / "node_modules" / ".bin" / "x") == "../pkg/bin.js"
    assert (tmp_path / "out" / "node_modules" / ".bin" / "x").read_text() == "js"
    assert os.readlink(tmp_path / "out" / "sub" / "lib.so") == "x.txt"
    assert not (tmp_path / "x").exists()


def test_cp_of_a_tree_with_a_fifo_or_a_symlink_out_is_one_line_either_way(served: Served, tmp_path: Path) -> None:
    """Issue 34, L2: these were tracebacks out of the session and "bad request" into it; a
    single FIFO hung the upload. cp copies regular files, directories and symlinks inside the
    tree, and says so: a symlink out of it (absolute, or by '..') is refused by name."""
    sandbox_id = _open(served)
    made = (
        "mkdir -p t1 t2 t4/d; mkfifo t1/pipe; echo a > t1/a; ln -s /etc/hostname t2/host; echo b > t2/b;"
        " ln -s .. t4/d/up; ln -s d/up/.. t4/esc"
    )
    assert ironflow("sandbox", "exec", sandbox_id, "--", "sh", "-c", made, env=served.env).returncode == 0
    for tree, text in (
        ("t1", "member 'pipe' is a FIFO"),
        ("t2", "member 'host' is a symlink to '/etc/hostname', which is absolute"),
        ("t4", "member 'esc' is a symlink to 'd/up/..', which steps back ('..') out of 'd/up'"),
    ):
        done = ironflow("sandbox", "cp", f"{sandbox_id}:{tree}", str(tmp_path / tree), env=served.env)
        _one_error_line(done, 2, f"refused the copy of '{tree}' into '{tmp_path / tree}': {text}")
        assert "relative symlinks inside the tree are copied; nothing was written" in done.stderr
        assert not (tmp_path / tree).exists()
    for tree in ("h1", "h2", "h3"):
        (tmp_path / tree / "sub").mkdir(parents=True)
        (tmp_path / tree / "sub" / "a").write_text("a")
    os.mkfifo(tmp_path / "h1" / "sub" / "pipe")
    (tmp_path / "h2" / "sub" / "host").symlink_to("/etc/hostname")
    (tmp_path / "h3" / "sub" / "up").symlink_to("../../outside")
    for tree, text in (
        ("h1", "sub/pipe' is a FIFO"),
        ("h2", "sub/host' is a symlink to '/etc/hostname', which is absolute"),
        ("h3", "sub/up' is a symlink to '../../outside', which points out of the tree"),
    ):
        done = ironflow("sandbox", "cp", str(tmp_path / tree), f"{sandbox_id}:{tree}", env=served.env)
        _one_error_line(done, 2, f"'{tmp_path / tree}/{text}: only regular files, directories and relative symlinks")
    fifo = ironflow("sandbox", "cp", str(tmp_path / "h1" / "sub" / "pipe"), f"{sandbox_id}:p", env=served.env)
    _one_error_line(fifo, 2, "is not a regular file or a directory")
    listed = ironflow("sandbox", "exec", sandbox_id, "--", "ls", "-A", env=served.env)
    assert listed.stdout.split() == ["t1", "t2", "t4"]  # nothing of a refused upload arrived
    unreadable = "mkdir t3; echo a > t3/a; echo b > t3/b; chmod 000 t3/b"
    assert ironflow("sandbox", "exec", sandbox_id, "--", "sh", "-c", unreadable, env=served.env).returncode == 0
    partial = ironflow("sandbox", "cp", f"{sandbox_id}:t3", str(tmp_path / "t3"), env=served.env)
    _one_error_line(partial, 2, "the tar stream stops before its end-of-archive block: the copy failed partway")


def test_bad_input_is_one_line_and_exit_2_an_unreachable_server_exit_3(served: Served) -> None:
    bare = cli_env()
    no_server = ironflow("sandbox", "ls", env=bare)
    _one_error_line(no_server, 2, "no sandbox server: local sessions live in the process that serves them")
    _one_error_line(ironflow("sandbox", "ls", "--server", "ftp://x", env=bare), 2, "invalid sandbox server")
    down = {**served.env, "IRONFLOW_SANDBOX_SERVER": "http://127.0.0.1:9"}
    _one_error_line(ironflow("sandbox", "ls", env=down), 3, "could not be reached")
    wrong = {**served.env, "IRONFLOW_SANDBOX_TOKEN": "not-the-token-at-all"}
    _one_error_line(ironflow("sandbox", "ls", env=wrong), 2, "refused the token")
    for args, text in (
        (["open", "--ttl", "5 parsecs"], "invalid duration"),
        (["open", "--label", "novalue"], "invalid --label 'novalue'"),
        (["open", "--label", "bad key=1"], "label key 'bad key' is not valid"),
        (["open", "--backend", "k8s"], "this server serves local sessions, not k8s"),
        (["exec", "not-an-id", "--", "true"], "invalid sandbox id 'not-an-id'"),
        (["exec", "sbx-0000000000000000"], "missing command"),
        (["exec", "sbx-0000000000000000", "--", "true"], "no open sandbox session"),
        (["exec", "sbx-0000000000000000", "--env", "X", "--", "true"], "invalid --env 'X'"),
        (["close"], "name one session"),
    ):
        _one_error_line(ironflow("sandbox", *args, env=served.env), 2, text)
    outputs = ironflow("sandbox", "ls", env=wrong)
    for text in (outputs.stdout, outputs.stderr):
        assert TOKEN not in text


def test_serve_makes_a_private_token_file_and_warns_off_loopback(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = cli_env(XDG_RUNTIME_DIR=str(runtime))
    server = start_serve(env, "--host", "0.0.0.0")
    try:
        token_file = runtime / "ironflow" / "sandbox-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        assert token not in Path(f"/proc/{server.proc.pid}/cmdline").read_text()
        url = server.url.replace("0.0.0.0", "127.0.0.1")
        sandbox_id = ironflow("sandbox", "open", "--server", url, env=env).stdout.strip()  # the client reads the file
        assert sandbox_id.startswith("sbx-")
        detached = ["sh", "-c", "setsid sleep 300 >/dev/null 2>&1 &"]
        started = ironflow("sandbox", "exec", "--server", url, sandbox_id, "--", *detached, env=env)
        assert started.returncode == 0, started.stderr
        pids = descendants(server.proc.pid)
        assert pids
    finally:
        assert server.stop() == 0  # SIGTERM closes every session
        _, err = server.proc.communicate()
    assert not any(running(pid) for pid in pids), "no process of any session outlives the server"
    lines = err.strip().splitlines()
    assert lines[0] == f"token: written to {token_file} (mode 0600; clients read it there)"
    assert lines[1].startswith("warning: serving on 0.0.0.0")
    assert token not in err
