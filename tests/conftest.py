"""Suite-wide settings: every test has a timeout (pyproject), warnings are errors, an
asyncio test that leaves a task running fails, and a test file that leaves a client, socket
or session open for the collector fails at its end (not in whichever later test the
collector happens to run). Hypothesis has no per-example deadline: a property test asserts
behaviour, and a slow example on a loaded machine is not a failure (speed is for benchmarks)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings
from tests.fakes.unclosed import unclosed_after_collect

settings.register_profile("ironflow", deadline=None)
settings.load_profile("ironflow")

pytest_plugins = [
    "tests.fakes.kube_fixtures",
    "tests.fakes.real_node",
    "tests.fakes.stores",
    "tests.fakes.docker_daemon",
    "tests.fakes.podman_daemon",
]


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    await asyncio.sleep(0)
    leaked = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    for task in leaked:
        task.cancel()
    assert not leaked, f"test leaked asyncio tasks: {[t.get_coro() for t in leaked]}"


@pytest.fixture(scope="module", autouse=True)
def _nothing_left_open() -> Iterator[None]:
    yield
    found = unclosed_after_collect()
    assert not found, f"this test file left {len(found)} thing(s) open for the collector: {found[:3]}"
