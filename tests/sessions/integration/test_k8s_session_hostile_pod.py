"""A Kubernetes session's pod is the agent's: what its runtime answers is not trusted. A reply
that is not HTTP, a head or an event line that never ends, a line that is no event, or output
past the runtime's own cap fails the command with one line, at once, and a file or a JSON
answer read whole stops at its bound: never a waiter left waiting or a buffer that grows. On
the test server and the real kube-apiserver with kwok, where each exec runs on this host, so
the pod's "python" here is a script that answers as told.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.sessions.integration.cases import SessionCase, open_case

from ironflow import errors
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.sessions import OpenOptions, client

_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _events(*lines: bytes) -> bytes:
    return _CHUNKED + b"".join(_chunk(line) for line in lines)


#: Past any pid_max (2**22): the kill that follows a failure runs on this host, and finds nothing.
_STARTED = b'{"id": "c1", "pid": 4194305}\n'
_OUTPUT = b'{"stdout": "' + b"x" * 60000 + b'"}\n'

ANSWERS = {
    "not HTTP": (b"SSH-2.0-OpenSSH\r\n\r\n", "malformed reply: the status line"),
    "a head that never ends": (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 200_000, "malformed reply: a line over"),
    "a chunk size that is none": (_CHUNKED + b"-5\r\n", "malformed reply: the chunk size"),
    "a line that is no event": (_events(_STARTED, b"not json\n"), "malformed command event: JSONDecodeError"),
    "an event of the wrong shape": (_events(_STARTED, b'{"exit_code": "zero"}\n'), "malformed command event"),
    "an event line that never ends": (_events(_STARTED, *[b"y" * 65536] * 20), "an event line over 1048576 bytes"),
    "output past the runtime's cap": (_events(_STARTED, *[_OUTPUT] * 600), "more output than its cap"),
}


@pytest.fixture(params=["k8s-test-server", "k8s-real-apiserver"])
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionCase]:
    async with open_case(request, request.param, tmp_path) as opened:
        yield opened


def _pod_python(tmp_path: Path) -> tuple[Path, Path]:
    """A "python" for the pod that runs the real one until ``answer`` exists, then answers each
    runtime request (more words than a kill's six) with its bytes: after reading the request whole,
    as the runtime does (the runtime's files, then the request's head and body). A command that
    leaves its stdin unread may lose its answer on the way (the API server stops at the unread
    stdin), and that is no answer of the pod's."""
    answer = tmp_path / "answer"
    script = tmp_path / "pod-python"
    script.write_text(
        f"#!{sys.executable} -I\n"
        "import os, shutil, sys\n"
        f"answer = {str(answer)!r}\n"
        "if len(sys.argv) > 7 and os.path.exists(answer):\n"
        "    stdin = sys.stdin.buffer\n"
        "    stdin.read(sum(int(n) for n in sys.argv[5:9]))  # the runtime's files\n"
        "    length = 0\n"
        "    stdin.readline()  # the nonce\n"
        "    while (line := stdin.readline()) not in (b'\\r\\n', b''):\n"
        "        if line.lower().startswith(b'content-length:'):\n"
        "            length = int(line.split(b':')[1])\n"
        "    stdin.read(length)\n"
        "    with open(answer, 'rb') as f:\n"
        "        shutil.copyfileobj(f, sys.stdout.buffer)\n"
        "    sys.exit(0)\n"
        "os.execvp('python3', ['python3', *sys.argv[1:]])\n"
    )
    script.chmod(0o755)
    return script, answer


@pytest.mark.parametrize("answer", ANSWERS.values(), ids=list(ANSWERS))
async def test_a_command_the_pod_answers_wrongly_fails_with_one_line(
    case: SessionCase, tmp_path: Path, answer: tuple[bytes, str]
) -> None:
    sent, said = answer
    python, answer_file = _pod_python(tmp_path)
    assert isinstance(case.sessions, K8sSessions)
    sessions = K8sSessions(case.sessions.settings, api=case.api, python=str(python))
    async with sessions, await sessions.open(OpenOptions(ttl=60)) as sandbox:
        assert (await sandbox.commands.run(["echo", "honest"])).stdout == "honest\n"
        answer_file.write_bytes(sent)
        result = await sandbox.commands.run(["echo", "hi"], timeout=60)
        assert result.exit_code == 1
        assert said in result.stderr
        assert result.stderr.startswith("ironflow: ")
        assert result.stderr.count("\n") == 1
        answer_file.unlink()
        assert (await sandbox.commands.run(["echo", "again"])).stdout == "again\n"


async def test_an_answer_past_its_bound_is_refused_not_held(
    case: SessionCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read whole stops at ``max_bytes`` (ConfigError), a JSON answer at its own bound."""
    python, answer_file = _pod_python(tmp_path)
    assert isinstance(case.sessions, K8sSessions)
    sessions = K8sSessions(case.sessions.settings, api=case.api, python=str(python))
    async with sessions, await sessions.open(OpenOptions(ttl=60)) as sandbox:
        await sandbox.files.write("f", b"x" * 5000)
        with pytest.raises(errors.ConfigError, match="'f' is over the 1000 byte limit"):
            await sandbox.files.read("f", max_bytes=1000)
        assert await sandbox.files.read("f", max_bytes=5000) == b"x" * 5000
        monkeypatch.setattr(client, "MAX_JSON_BYTES", 4096)
        entries = json.dumps([{"name": "n" * 100, "size": 1, "type": "file", "mod_time": 0}] * 100).encode()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(entries)
        answer_file.write_bytes(head + entries)
        with pytest.raises(errors.SandboxError, match="JSON over 4096 bytes"):
            await sandbox.files.list(".")
        answer_file.unlink()
        assert [e.name for e in await sandbox.files.list(".")] == ["f"]


async def test_what_comes_after_a_commands_exit_is_dropped(case: SessionCase, tmp_path: Path) -> None:
    """Past its exit, a command's answer is whole: a bad line after it changes nothing, and no
    failure is added to the events a later wait reads."""
    python, answer_file = _pod_python(tmp_path)
    assert isinstance(case.sessions, K8sSessions)
    sessions = K8sSessions(case.sessions.settings, api=case.api, python=str(python))
    async with sessions, await sessions.open(OpenOptions(ttl=60)) as sandbox:
        answer_file.write_bytes(_events(_STARTED, b'{"stdout": "hi\\n"}\n', b'{"exit_code": 0}\n', b"not json\n"))
        job = await sandbox.commands.start(["echo", "hi"])
        first = await job.wait()
        again = await job.wait()
        assert (first.exit_code, first.stdout, first.stderr) == (0, "hi\n", "")
        assert (again.exit_code, again.stdout, again.stderr) == (0, "hi\n", "")
