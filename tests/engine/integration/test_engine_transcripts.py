"""Transcripts on real stores (SQLite and PostgreSQL): numbered chunks, read after a cursor, and
what the runner stores of an agent step's output: redacted, batched, capped, and kept however
the attempt ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ironflow import errors
from ironflow.engine import accounts, model
from ironflow.engine.runner import Runner
from ironflow.engine.store import Store, open_store
from ironflow.engine.worker import Worker
from ironflow.provider import ACCOUNT_KIND_CLAUDE_SUBSCRIPTION
from ironflow.secrets import REDACTED
from ironflow.testing import find_leaks
from ironflow.testing.engine import RecordingProvider
from ironflow.testing.polling import eventually

WORKFLOWS = Path(__file__).parent / "engine_workflows.py"
API_KEY = "sk-ant-api03-" + "x1Y2z3" * 12
OUT = model.TranscriptStream.STDOUT
ERR = model.TranscriptStream.STDERR
NOTE = model.TranscriptStream.IRONFLOW


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = open_store(store_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


def chunk(run_id: str, text: str, *, position: int = 0, stream: model.TranscriptStream = OUT) -> model.TranscriptChunk:
    return model.TranscriptChunk(run_id, position, f"step {position}", 1, stream, text, time.time())


async def submit(store: Store, workflow: str, input: Any) -> str:
    run_id = model.new_id()
    await store.create_run(model.RunRecord(id=run_id, workflow=f"{WORKFLOWS}:{workflow}", input=input))
    return run_id


async def run_all(store: Store, provider: RecordingProvider, **runner: Any) -> None:
    await Worker(store, lambda r: Runner(store, provider, **runner), lease_s=5).run(until_idle=True)


async def stored_lines(store: Store, run_id: str) -> list[tuple[int, str, str]]:
    """(attempt, stream, line) of every stored line of the run, in order."""
    return [(c.attempt, str(c.stream), line) for c in await store.transcript(run_id) for line in c.lines]


# --- the store ---------------------------------------------------------------------------------


async def test_chunks_are_numbered_per_run_in_order_and_read_after_a_cursor(store: Store) -> None:
    await store.append_transcript([chunk("r1", "a"), chunk("r2", "x"), chunk("r1", "b\nc", stream=ERR)])
    await store.append_transcript([chunk("r1", "d", position=1)])
    first = await store.transcript("r1")
    assert [(c.seq, c.position, c.stream, c.lines) for c in first] == [
        (1, 0, OUT, ["a"]), (2, 0, ERR, ["b", "c"]), (3, 1, OUT, ["d"])
    ]  # fmt: skip
    assert [c.seq for c in await store.transcript("r2")] == [1]
    assert [c.text for c in await store.transcript("r1", after=2)] == ["d"]
    assert [c.text for c in await store.transcript("r1", position=0)] == ["a", "b\nc"]
    assert [c.text for c in await store.transcript("r1", limit=1)] == ["a"]
    assert await store.transcript("r1", after=3) == []


async def test_concurrent_appends_to_one_run_never_share_or_skip_a_number(store_url: str) -> None:
    stores = [open_store(store_url), open_store(store_url)]  # two connections, as two workers have
    for s in stores:
        await s.open()
    try:
        await asyncio.gather(
            *(stores[i % 2].append_transcript([chunk("r", f"{i}.{j}") for j in range(3)]) for i in range(20))
        )
        found = await stores[0].transcript("r", limit=1000)
    finally:
        for s in stores:
            await s.close()
    assert [c.seq for c in found] == list(range(1, 61))
    for i in range(20):  # one append's chunks are consecutive
        seqs = [c.seq for c in found if c.text.startswith(f"{i}.")]
        assert seqs == list(range(seqs[0], seqs[0] + 3))


async def test_run_ids_match_by_prefix_literally_and_case_sensitively(store: Store) -> None:
    ids = ["0190aa-1", "0190aa-2", "0190ab-1", "a%b_c"]
    for run_id in ids:
        await store.create_run(model.RunRecord(id=run_id, workflow="w:f", input=None))
    assert await store.match_run_ids("0190a") == ids[:3]
    assert await store.match_run_ids("0190aa", limit=1) == ids[:1]
    assert await store.match_run_ids("0190ab-1") == ["0190ab-1"]
    assert await store.match_run_ids("0190AA") == []
    assert await store.match_run_ids("a%") == ["a%b_c"]
    assert await store.match_run_ids("%") == []  # no wildcard
    assert await store.match_run_ids("a_") == []


# --- what the runner stores --------------------------------------------------------------------


async def test_a_chatty_steps_lines_are_stored_in_order_in_a_few_chunks(store: Store) -> None:
    lines = [("stderr" if i % 100 == 99 else "stdout", f'{{"n": {i}}}') for i in range(1000)]
    provider = RecordingProvider(output={"talk": lines})
    run_id = await submit(store, "linear", {"steps": ["talk"]})
    await run_all(store, provider)
    chunks = await store.transcript(run_id, limit=1000)
    assert [(stream, line) for _, stream, line in await stored_lines(store, run_id)] == [
        *lines, ("stdout", '{"type": "result", "result": "done talk"}')
    ]  # fmt: skip
    assert len(chunks) <= 25  # one row per run of same-stream lines per write, not one per line
    assert {(c.position, c.step, c.attempt) for c in chunks} == {(0, "talk", 1)}


async def test_a_sandboxs_own_notes_are_stored_as_ironflow_lines(store: Store) -> None:
    """An egress decision the local sandbox reports (stream ``ironflow``) is the step's record, shown
    by ``ironflow logs`` and the UI as ironflow's, never as the agent's output."""
    note = "egress denied example.com:443 (CONNECT): no rule allows example.com:443"
    provider = RecordingProvider(output={"fetch": [("ironflow", note)]})
    run_id = await submit(store, "linear", {"steps": ["fetch"]})
    await run_all(store, provider)
    stored = [(stream, line) for _, stream, line in await stored_lines(store, run_id)]
    assert stored[0] == ("ironflow", note)


async def test_secrets_in_a_steps_output_are_redacted_before_they_are_stored(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    account_token = "plain-looking-account-credential-1234"
    monkeypatch.setenv("IRONFLOW_TEST_ACCOUNT", account_token)
    account = accounts.ProviderAccount("a", accounts.CredentialRef(env="IRONFLOW_TEST_ACCOUNT"))
    pool = accounts.AccountPool(store, [account])
    said = [
        ("stdout", f'{{"type":"user","message":{{"content":[{{"type":"tool_result","content":"{API_KEY}\\n"}}]}}}}'),
        ("stderr", f"curl: Authorization: Bearer {account_token}"),
        ("stdout", f"token {account_token} and proxy token ifap_{'ab' * 32}"),
    ]
    provider = RecordingProvider(output={"leaky": said}, account_kind=ACCOUNT_KIND_CLAUDE_SUBSCRIPTION)
    run_id = await submit(store, "linear", {"steps": ["leaky"]})
    await run_all(store, provider, accounts=pool)
    stored = await store.transcript(run_id)
    assert find_leaks([API_KEY, account_token, "ifap_abab"], *map(repr, stored)) == []
    lines = [line for _, _, line in await stored_lines(store, run_id)]
    assert lines[:3] == [
        f'{{"type":"user","message":{{"content":[{{"type":"tool_result","content":"{REDACTED}\\n"}}]}}}}',
        f"curl: Authorization: Bearer {REDACTED}",
        f"token {REDACTED} and proxy token {REDACTED}",
    ]


async def test_a_secret_untrusted_block_is_redacted_from_the_stored_transcript(store: Store) -> None:
    """The caller marked the block secret (``Prompt.untrusted(label, Secret(text))``): an agent that
    quotes it, as given or as rendered, leaves no clear copy in the store."""
    body = "private issue </untrusted-x> of customer 4711"
    said = [("stdout", f"quoting: {body}"), ("stdout", "escaped: private issue &lt;/untrusted-x> of customer 4711")]
    provider = RecordingProvider(output={"summary": said})
    run_id = await submit(store, "secret_block", {"body": body})
    await run_all(store, provider)
    lines = [line for _, _, line in await stored_lines(store, run_id)]
    assert lines[:2] == [f"quoting: {REDACTED}", f"escaped: {REDACTED}"]
    assert find_leaks([body, "customer 4711"], *map(repr, await store.transcript(run_id))) == []
    (config,) = provider.configs
    assert body in config.prompt.replace("&lt;", "<")  # the agent itself got the text


async def test_a_failed_attempt_keeps_the_errors_output_and_says_how_it_ended(store: Store) -> None:
    failure = errors.ProcessFailed(1, f"boom\nkey was {API_KEY}")
    provider = RecordingProvider(failures={"flaky": [failure]})
    run_id = await submit(store, "flaky", {"retries": 1})
    await run_all(store, provider)
    assert (await store.get_run(run_id)).status is model.RunStatus.SUCCEEDED  # type: ignore[union-attr]
    assert await stored_lines(store, run_id) == [
        (1, "stderr", "boom"),
        (1, "stderr", f"key was {REDACTED}"),
        (1, "ironflow", "attempt 1 failed: ProcessFailed: claude process exited with code 1: boom"),
        (2, "stdout", '{"type": "result", "result": "done flaky"}'),
    ]
    (step,) = await store.steps(run_id)
    assert step.result.debug_messages is None  # the turns are in the transcript, not in the result


async def test_past_the_cap_the_rest_is_dropped_and_one_note_says_how_much(store: Store) -> None:
    provider = RecordingProvider(output={"big": [("stdout", "x" * 99)] * 30})
    run_id = await submit(store, "linear", {"steps": ["big"]})
    await run_all(store, provider, transcript_cap_bytes=1000)
    lines = await stored_lines(store, run_id)
    assert lines == [
        *[(1, "stdout", "x" * 99)] * 10,
        (1, "ironflow", "transcript cap of 1000 B reached: 21 more lines (2.0 KiB) not stored"),
    ]


async def test_lines_reach_the_store_while_the_step_runs_and_a_cancel_keeps_them(store: Store) -> None:
    provider = RecordingProvider(output={"slow": [("stdout", "started")]}, step_delays={"slow": 30.0})
    run_id = await submit(store, "linear", {"steps": ["slow"]})
    worker = Worker(store, lambda r: Runner(store, provider), lease_s=1.0)
    task = asyncio.create_task(worker.run())
    try:
        await eventually(lambda: store.transcript(run_id), what="the first line stored while the step runs")
        await store.cancel_run(run_id)
        await eventually(lambda: bool(worker.outcomes))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert await stored_lines(store, run_id) == [(1, "stdout", "started"), (1, "ironflow", "attempt 1 cancelled")]


def test_a_negative_cap_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="transcript_cap_bytes must be 0 or more"):
        Runner(store=None, provider=RecordingProvider(), transcript_cap_bytes=-1)  # type: ignore[arg-type]
