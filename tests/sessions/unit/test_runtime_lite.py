"""The runtime's stand-ins for json, contextlib and threading (``lite.py``) behave as those do."""

from __future__ import annotations

import json
import threading
import time

import pytest
from tests.sessions.unit.runtime_files import runtime_module

DOCS = [
    {"id": "c1", "pid": 42},
    {"stdout": 'é\n"\\\x00\u2028 😀'},
    {"exit_code": -9, "timed_out": False, "none": None, "nested": [[], {}, [1.5, 1e300, -0.0]]},
    [],
    "text",
    12345678901234567890,
]


@pytest.mark.parametrize("doc", DOCS)
def test_dumps_is_json_dumps_and_loads_reads_it_back(doc: object) -> None:
    with runtime_module("lite") as lite:
        assert lite.dumps(doc) == json.dumps(doc).encode()
        assert lite.loads(lite.dumps(doc)) == doc
        assert lite.loads(json.dumps(doc, indent=2)) == doc


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity, -Infinity]", " \n\t1\r\n", '"x"'])
def test_loads_reads_what_json_loads_reads(text: str) -> None:
    with runtime_module("lite") as lite:
        assert json.dumps(lite.loads(text)) == json.dumps(json.loads(text))
        assert json.dumps(lite.loads(text.encode())) == json.dumps(json.loads(text))


@pytest.mark.parametrize("bad", [b"", b"   ", b"{", b"[1,]", b"{} x", b'{"a":1}{}', b"\xff", b'"\x01"', b"nul"])
def test_loads_refuses_what_json_loads_refuses_with_a_value_error(bad: bytes) -> None:
    with pytest.raises(json.JSONDecodeError if bad != b"\xff" else UnicodeDecodeError):
        json.loads(bad)
    refused = r"Expecting|Extra data|can't decode|Invalid control"
    with runtime_module("lite") as lite, pytest.raises(ValueError, match=refused):
        lite.loads(bad)


def test_dumps_refuses_what_json_cannot_write() -> None:
    with runtime_module("lite") as lite, pytest.raises(TypeError, match="not JSON serializable"):
        lite.dumps({"a": object()})


def test_suppress_swallows_only_what_it_names() -> None:
    with runtime_module("lite") as lite:
        with lite.suppress(OSError, KeyError):
            raise FileNotFoundError
        with pytest.raises(ValueError, match="not suppressed"), lite.suppress(OSError):
            raise ValueError("not suppressed")


def test_a_condition_wakes_every_waiter_and_a_wait_ends_at_its_timeout() -> None:
    with runtime_module("lite") as lite:
        cond, woke = lite.Condition(), []

        def waiter() -> None:
            with cond:
                cond.wait(30)
                woke.append(1)

        threads = [threading.Thread(target=waiter) for _ in range(3)]
        for thread in threads:
            thread.start()
        while True:  # every waiter waiting: the lock released in wait
            with cond:
                if len(cond._waiters) == 3:
                    cond.notify_all()
                    break
            time.sleep(0.001)
        for thread in threads:
            thread.join(10)
        assert woke == [1, 1, 1]
        start = time.monotonic()
        with cond:
            cond.wait(0.05)
            assert not cond._waiters  # a timed-out waiter leaves the list
        assert time.monotonic() - start >= 0.05


def test_start_thread_runs_its_target_with_its_arguments() -> None:
    with runtime_module("lite") as lite:
        done = threading.Event()
        got: list[object] = []

        def target(a: object, b: object) -> None:
            got.append((a, b))
            done.set()

        lite.start_thread(target, 1, "two")
        assert done.wait(10)
        assert got == [(1, "two")]
