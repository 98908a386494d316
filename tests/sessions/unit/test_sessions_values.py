"""The session values: ids, durations, the wire form of a session; the runtime file stands alone."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ironflow import egress, errors
from ironflow.sandbox_runtime import SERVER_PATH
from ironflow.sessions import OpenOptions, SessionInfo, check_session_id, parse_duration
from ironflow.sessions.values import SnapshotInfo


@pytest.mark.parametrize(
    "name",
    [
        *("server.py", "streams.py", "pod_exec.py", "startup.py", "confine.py"),
        *("terminal.py", "watch.py", "lite.py", "popen.py"),
    ],
)
def test_the_runtime_server_imports_only_the_standard_library(name: str) -> None:
    tree = ast.parse((Path(SERVER_PATH).parent / name).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import would need the package"
            imported.add((node.module or "").split(".")[0])
    imported -= {"__future__", "streams", "server", "lite", "popen"}  # the sibling files
    assert "ironflow" not in imported
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_the_runtime_starts_without_the_modules_only_some_requests_need() -> None:
    """Every import at start is a slice of each cold session open: the tar stream's module, argparse,
    hmac's OpenSSL, concurrent.futures (with logging) and typing are not among them."""
    folder = str(Path(SERVER_PATH).parent)
    code = f"import sys; sys.path.insert(0, {folder!r}); import server, confine, startup; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert {"server", "confine", "startup", "streams", "lite", "popen"} <= loaded
    slow = {"tarfile", "argparse", "hmac", "_hashlib", "concurrent.futures", "logging", "typing", "dataclasses"}
    assert not slow & loaded, slow & loaded
    # Each of these imports 18 to 40 modules (functools, collections, enum, re...): about 3 ms
    # apiece under gVisor. The runtime uses their C modules (lite.py, popen.py).
    heavy = {"json", "subprocess", "threading", "socket", "signal", "contextlib", "re", "enum", "functools"}
    assert not heavy & loaded, heavy & loaded
    assert "terminal" not in loaded  # a command's controls load with the first request that asks
    assert "watch" not in loaded  # a directory's watch too


def test_the_runtime_imports_what_only_some_requests_use_with_the_first_of_them() -> None:
    """A command line to split, a query, a quoted path, stdin to decode, a queue of the spawner's:
    none is in every session's cold open (nor in its idle memory)."""
    folder = str(Path(SERVER_PATH).parent)
    code = f"import sys; sys.path.insert(0, {folder!r}); import server, confine, startup; print(' '.join(sys.modules))"
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "server" in loaded
    lazy = {"shlex", "urllib.parse", "ipaddress", "base64", "binascii", "queue", "heapq"}
    assert not lazy & loaded, lazy & loaded


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("500ms", 0.5), ("30s", 30.0), ("30m", 1800.0), ("2h", 7200.0)]
)
def test_durations_read_as_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5m", "5d", "m", "1e9"])
def test_a_bad_duration_is_a_config_error(text: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize("value", ["sbx-0123456789abcdef"])
def test_a_session_id_is_checked(value: str) -> None:
    assert check_session_id(value) == value


@pytest.mark.parametrize("value", ["", "sbx-0123", "SBX-0123456789abcdef", "sbx-0123456789abcdeg", "../etc", "a" * 500])
def test_a_bad_session_id_is_refused_in_one_short_line(value: str) -> None:
    with pytest.raises(errors.ConfigError, match="invalid sandbox id") as caught:
        check_session_id(value)
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 200


def test_a_session_survives_its_wire_form() -> None:
    info = SessionInfo("sbx-0123456789abcdef", "local", "bwrap", 1.5, 61.5, {"team": "a"}, "run-1")
    assert SessionInfo.from_json(info.to_json()) == info


def test_open_options_carry_an_egress_policy_over_the_wire() -> None:
    policy = egress.EgressPolicy(allow=(egress.parse_allow_host("pypi.org"),))
    options = OpenOptions(ttl=60, egress=policy)
    assert OpenOptions.from_json(json.loads(json.dumps(options.to_json()))).egress == policy
    assert "egress" not in OpenOptions(ttl=60).to_json()
    with pytest.raises(errors.ConfigError, match="egress"):
        OpenOptions.from_json({"egress": {"allow": [5]}})


def test_a_snapshot_survives_its_wire_form() -> None:
    info = SnapshotInfo(
        "snap-0123456789abcdef", "base", "sbx-0123456789abcdef", 42, 1.5, "bwrap", ("workspace", "home")
    )
    assert SnapshotInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
    with pytest.raises(errors.ConfigError, match="invalid snapshot id"):
        SnapshotInfo.from_json({**info.to_json(), "id": "../../etc"})


def test_open_options_carry_a_snapshot_and_an_idle_suspend_over_the_wire() -> None:
    options = OpenOptions(ttl=60, idle_suspend=300, from_snapshot="snap-0123456789abcdef")
    assert OpenOptions.from_json(json.loads(json.dumps(options.to_json()))) == options
    assert OpenOptions.from_json({"idle_suspend": "5m"}).idle_suspend == 300
    assert "from_snapshot" not in OpenOptions().to_json()


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"from_snapshot": "sbx-0123456789abcdef"}, "invalid snapshot id"),
        ({"from_snapshot": 5}, "from_snapshot must be a snapshot id"),
        ({"from_snapshot": "snap-0123456789abcdef", "workspace": "/tmp"}, "not both"),
        ({"idle_suspend": -1}, "idle_suspend must be a positive"),
        ({"idle_suspend": "soon"}, "invalid duration"),
    ],
)
def test_bad_snapshot_and_idle_suspend_options_are_refused(doc: dict[str, object], words: str) -> None:
    with pytest.raises(errors.ConfigError, match=words):
        OpenOptions.from_json(doc)


def test_a_paused_session_says_so_on_the_wire() -> None:
    info = SessionInfo("sbx-0123456789abcdef", "local", "bwrap", 1.5, 61.5, paused=True)
    assert SessionInfo.from_json(info.to_json()).paused
    assert not SessionInfo.from_json({"id": "sbx-0123456789abcdef"}).paused
