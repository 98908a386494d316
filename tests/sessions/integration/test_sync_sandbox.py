"""The blocking ``Sandbox`` against a real ``ironflow sandbox serve``: the same calls as
``AsyncSandbox``, no event loop in the caller, and ``with`` closes the session."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from tests.sessions.integration.serving import TOKEN, Served

from ironflow import errors
from ironflow.sessions import Exit, OpenOptions, Output, Sandbox, SessionNotFound

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def test_the_blocking_face_runs_commands_and_moves_files(served: Served, tmp_path: Path) -> None:
    before = threading.active_count()
    with Sandbox.open(OpenOptions(ttl=60, labels={"face": "sync"}), server=served.url, token=TOKEN) as sandbox:
        assert TOKEN not in repr(sandbox)
        assert sandbox.info.labels == {"face": "sync"}
        result = sandbox.commands.run(["sh", "-c", "echo out; echo err >&2; exit 4"])
        assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 4)
        events = list(sandbox.commands.stream(["sh", "-c", "echo a; exit 2"]))
        assert events[0] == Output("stdout", "a\n")
        assert events[-1] == Exit(2, False)
        for event in sandbox.commands.stream(["sh", "-c", "echo early; sleep 30"], timeout=60):
            assert event == Output("stdout", "early\n")
            break  # left early: the stream is closed, not leaked
        background = sandbox.commands.start(["sleep", "60"])
        assert background.kill() is True
        assert background.wait().exit_code == 137
        assert sandbox.files.write("d/f.txt", "hello") == 5
        assert sandbox.files.read("d/f.txt") == b"hello"
        assert [e.name for e in sandbox.files.list("d")] == ["f.txt"]
        assert sandbox.files.exists("d/f.txt")
        (tmp_path / "tree").mkdir()
        (tmp_path / "tree" / "x").write_text("x")
        assert sandbox.files.upload_dir(str(tmp_path / "tree"), "copied") >= 2
        sandbox.files.download_dir("copied", str(tmp_path / "back"))
        assert (tmp_path / "back" / "x").read_text() == "x"
        sandbox.files.remove("d", recursive=True)
        assert not sandbox.files.exists("d")
        with pytest.raises(PermissionError):
            sandbox.files.read("../../etc/passwd")
        session_id = sandbox.id
    with pytest.raises(SessionNotFound):
        Sandbox.connect(session_id, server=served.url, token=TOKEN)
    sandbox.close()  # twice is no error
    assert threading.active_count() == before, "each handle's loop thread ends with it"


def test_a_session_outlives_a_disconnected_handle(served: Served) -> None:
    first = Sandbox.open(OpenOptions(ttl=60), server=served.url, token=TOKEN)
    first.files.write("kept", "1")
    first.disconnect()
    again = Sandbox.connect(first.id, server=served.url, token=TOKEN)
    assert again.files.read("kept") == b"1"
    again.close()


def test_the_old_open_keywords_still_open_a_session_with_a_warning(served: Served) -> None:
    with pytest.warns(DeprecationWarning, match="pass OpenOptions"):
        sandbox = Sandbox.open(server=served.url, token=TOKEN, ttl=60, labels={"face": "old"})
    with sandbox:
        assert sandbox.info.labels == {"face": "old"}


def test_without_a_server_it_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IRONFLOW_SANDBOX_SERVER", raising=False)
    with pytest.raises(errors.ConfigError, match="start `ironflow sandbox serve`"):
        Sandbox.open(token=TOKEN)


def test_the_blocking_face_writes_stdin_signals_and_finds_a_command_again(served: Served) -> None:
    with Sandbox.open(OpenOptions(ttl=60), server=served.url, token=TOKEN) as sandbox:
        cat = sandbox.commands.start(["cat"], keep_stdin=True)
        assert cat.send_stdin("a\n") == 2
        again = sandbox.commands.connect(cat.id)
        again.send_stdin("b", eof=True)
        assert again.wait(30).stdout == "a\nb"
        terminal = sandbox.commands.run(["sh", "-c", "stty size"], pty=True, cols=70, rows=10)
        assert terminal.stdout == "10 70\r\n"
        sleeper = sandbox.commands.start(["sleep", "60"], pty=True)
        sleeper.resize(100, 30)
        assert sleeper.signal("TERM") is True
        assert sleeper.wait(30).exit_code == 128 + 15
        with pytest.raises(errors.ConfigError, match="has ended"):
            sleeper.close_stdin()


def test_the_blocking_watch_yields_changes_through_the_server_and_ends_when_left(served: Served) -> None:
    with Sandbox.open(OpenOptions(ttl=60), server=served.url, token=TOKEN) as sandbox:
        stop = threading.Event()

        def touch() -> None:  # until the watch is in place, a new name each time
            for n in range(100):
                if stop.is_set():
                    return
                sandbox.commands.run(["touch", f"m{n}"])
                stop.wait(0.3)

        toucher = threading.Thread(target=touch)
        toucher.start()
        try:
            for event in sandbox.files.watch(".", recursive=True):
                assert event.type == "create"
                assert event.name.startswith("m")
                break  # left early: the watch's stream is closed
        finally:
            stop.set()
            toucher.join()
        with pytest.raises(PermissionError):
            next(iter(sandbox.files.watch("..")))
