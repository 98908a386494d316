"""The UI's handlers over a real socket, on SQLite and PostgreSQL: pages, filters, 400 and 404, cancel and
retry through their forms, CSRF refusal, the admin token, the Host check, escaping and the security headers."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from ironflow.engine import model
from ironflow.engine.runner import Runner
from ironflow.engine.store import Store
from ironflow.engine.worker import Worker
from ironflow.results import AgentResult
from ironflow.secrets import REDACTED, find_leaks
from ironflow.testing.engine import RecordingProvider
from ironflow.ui import UiSecurity, create_app
from ironflow.ui.security import SECURITY_HEADERS, SESSION_COOKIE

TOKEN = "admin-token-for-the-ui-tests-0123456789"
WORKFLOWS = Path(__file__).parents[2] / "engine" / "integration" / "engine_workflows.py"
FAKE_KEY = "sk-ant-api03-" + "Fak3K3y_" * 10 + "AA"
Client = TestClient[Any, Any]
MakeClient = Callable[[UiSecurity], Coroutine[Any, Any, Client]]


@pytest.fixture
async def make_client(store: Store) -> AsyncIterator[MakeClient]:
    clients: list[Client] = []

    async def make(security: UiSecurity) -> Client:
        client: Client = TestClient(TestServer(create_app(store, security), host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def client(make_client: MakeClient) -> Client:
    return await make_client(UiSecurity())


async def add_run(store: Store, workflow: str = "/w/review.py:review", **fields: Any) -> model.RunRecord:
    return await store.create_run(model.RunRecord(id=model.new_id(), workflow=workflow, input={}, **fields))


def csrf_of(page: str, action: str) -> str:
    found = re.search(rf'action="[^"]*/{action}"><input type="hidden" name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, f"no {action} form on the page"
    return found.group(1)


async def test_the_runs_page_lists_top_level_runs_newest_first_with_their_totals(store: Store, client: Client) -> None:
    older = await add_run(store)
    newer = await add_run(store, workflow="/w/fix.py:fix")
    await store.start_child_run(
        model.RunRecord(
            id="child-run", workflow="/w/review.py:sub", input={}, root_run_id=newer.id, parent_run_id=newer.id
        )
    )
    await store.save_step(
        model.StepRecord(
            "child-run",
            0,
            "summary",
            model.StepKind.AGENT,
            started_at=1.0,
            result=AgentResult("ok", 5, cost_usd=0.5, input_tokens=1200, output_tokens=34),
        )
    )
    response = await client.get("/")
    page = await response.text()
    assert response.status == 200
    assert re.findall(r'data-run-id="([^"]+)"', page) == [newer.id, older.id]  # the child run is on its parent's page
    newer_row = page[page.index(f'data-run-id="{newer.id}"') :].split("</tr>")[0]
    assert ">1,234<" in newer_row
    assert ">$0.5000<" in newer_row
    assert ">fix.py:fix<" in newer_row


async def test_filters_and_the_older_link_page_through_the_runs(store: Store, client: Client) -> None:
    runs = [await add_run(store) for _ in range(5)]
    await store.cancel_run(runs[1].id)
    page = await (await client.get("/?limit=2")).text()
    assert re.findall(r'data-run-id="([^"]+)"', page) == [runs[4].id, runs[3].id]
    older = re.search(r'class="older" href="([^"]+)"', page)
    assert older is not None
    assert older.group(1) == f"/?limit=2&amp;before={runs[3].id}"
    page = await (await client.get(f"/?limit=2&before={runs[3].id}")).text()
    assert re.findall(r'data-run-id="([^"]+)"', page) == [runs[2].id, runs[1].id]
    page = await (await client.get(f"/?limit=2&before={runs[1].id}")).text()
    assert re.findall(r'data-run-id="([^"]+)"', page) == [runs[0].id]
    assert 'class="older"' not in page
    page = await (await client.get("/?status=cancelled&workflow=review.py:review")).text()
    assert re.findall(r'data-run-id="([^"]+)"', page) == [runs[1].id]
    assert '<option value="cancelled" selected>' in page


@pytest.mark.parametrize(
    ("query", "line"),
    [
        ("status=done", "status &#x27;done&#x27; is not a run state; use one of pending, running, succeeded"),
        ("limit=0", "limit &#x27;0&#x27; is not a number from 1 to 500"),
        ("before=%3Cx%3E", "before must be a run id"),
        ("colour=red", "unknown query parameter &#x27;colour&#x27;"),
    ],
)
async def test_a_bad_filter_is_400_with_one_line(client: Client, query: str, line: str) -> None:
    response = await client.get(f"/?{query}")
    assert response.status == 400
    assert line in await response.text()


async def test_unknown_runs_and_paths_are_404_pages(client: Client) -> None:
    response = await client.get("/runs/no-such-run")
    assert (response.status, "no run no-such-run in the store" in await response.text()) == (404, True)
    response = await client.get("/nope")
    assert (response.status, "no page at /nope" in await response.text()) == (404, True)
    for header, value in SECURITY_HEADERS.items():
        assert response.headers[header] == value


async def test_a_run_id_prefix_the_cli_takes_leads_to_the_run_s_page(store: Store, client: Client) -> None:
    """Issue 31: the UI answered 404 to a start of a run id that ``ironflow runs show`` takes."""
    for suffix in ("1", "2", "3"):
        await store.create_run(model.RunRecord(id=f"0190cafe-{suffix}", workflow="/w/review.py:review", input={}))
    await store.create_run(model.RunRecord(id="0190beef-1", workflow="/w/review.py:review", input={}))
    response = await client.get("/runs/0190be", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (303, "/runs/0190beef-1")
    response = await client.get("/runs/0190be")
    assert (response.status, str(response.url.path)) == (200, "/runs/0190beef-1")
    assert "0190beef-1" in await response.text()
    response = await client.get("/runs/0190beef-1")  # a whole id is its page, no redirect
    assert (response.status, response.history) == (200, ())
    response = await client.get("/runs/0190ca")
    assert response.status == 400
    said = "run id 0190ca is the start of several runs&#x27; ids (0190cafe-1, 0190cafe-2, 0190cafe-3); give more of it"
    assert said in await response.text()
    response = await client.get("/runs/0190d")
    assert (response.status, "no run 0190d in the store" in await response.text()) == (404, True)


async def test_cancel_and_retry_through_the_forms_change_the_store(store: Store, client: Client) -> None:
    run = await add_run(store)
    page = await (await client.get(f"/runs/{run.id}")).text()
    assert f'action="/runs/{run.id}/retry"' not in page  # a pending run cannot be retried
    response = await client.post(
        f"/runs/{run.id}/cancel", data={"csrf": csrf_of(page, "cancel")}, allow_redirects=False
    )
    assert (response.status, response.headers["Location"]) == (303, f"/runs/{run.id}")
    assert response.headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.status is model.RunStatus.CANCELLED
    page = await (await client.get(f"/runs/{run.id}")).text()
    assert f'action="/runs/{run.id}/cancel"' not in page
    response = await client.post(f"/runs/{run.id}/retry", data={"csrf": csrf_of(page, "retry")})
    assert response.status == 200  # followed to the run's page
    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.status is model.RunStatus.PENDING


async def test_a_post_without_the_right_csrf_field_changes_nothing(store: Store, client: Client) -> None:
    run, other = await add_run(store), await add_run(store)
    other_page = await (await client.get(f"/runs/{other.id}")).text()
    for data in ({}, {"csrf": "0" * 64}, {"csrf": csrf_of(other_page, "cancel")}, {"csrf": "é"}):
        response = await client.post(f"/runs/{run.id}/cancel", data=data)
        assert response.status == 403, data
        assert "CSRF token is missing or wrong" in await response.text()
    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.status is model.RunStatus.PENDING


async def test_a_change_the_runs_state_refuses_is_409_with_the_cli_s_words(store: Store, client: Client) -> None:
    run = await add_run(store)
    csrf = UiSecurity().csrf_token  # another process's secret: refused before the state is looked at
    assert (await client.post(f"/runs/{run.id}/retry", data={"csrf": csrf(f"/runs/{run.id}/retry")})).status == 403
    page = await (await client.get(f"/runs/{run.id}")).text()
    await store.cancel_run(run.id)  # the page is stale: cancel was offered, the run is cancelled now
    response = await client.post(f"/runs/{run.id}/cancel", data={"csrf": csrf_of(page, "cancel")})
    assert response.status == 409
    assert f"run {run.id} already cancelled; nothing to cancel" in await response.text()


async def test_with_an_admin_token_every_page_asks_for_it(store: Store, make_client: MakeClient) -> None:
    client = await make_client(UiSecurity(TOKEN))
    run = await add_run(store)
    for path in ("/", f"/runs/{run.id}", "/sandboxes"):
        response = await client.get(path)
        assert response.status == 401, path
        assert 'name="token"' in await response.text()
    assert (await client.get("/", headers={"Authorization": "Bearer wrong"})).status == 401
    assert (await client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200
    assert (await client.get("/static/style.css")).status == 200
    form = await (await client.get("/login")).text()
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', form)
    assert csrf is not None
    wrong = await client.post("/login", data={"csrf": csrf.group(1), "token": "not-the-token"})
    assert wrong.status == 401
    assert "That token is not the admin token." in await wrong.text()
    assert SESSION_COOKIE not in wrong.cookies
    assert (await client.post("/login", data={"token": TOKEN})).status == 403  # no CSRF field
    signed_in = await client.post("/login", data={"csrf": csrf.group(1), "token": TOKEN}, allow_redirects=False)
    assert signed_in.status == 303
    cookie = signed_in.cookies[SESSION_COOKIE]
    assert TOKEN not in cookie.value
    assert (cookie["httponly"], cookie["samesite"]) == (True, "Strict")
    page = await client.get(f"/runs/{run.id}")  # the client keeps the cookie
    assert page.status == 200
    assert TOKEN not in await page.text()


async def test_without_a_token_only_loopback_host_names_are_served(client: Client) -> None:
    for host in ("127.0.0.1:8090", "localhost", "[::1]:8090"):
        assert (await client.get("/", headers={"Host": host})).status == 200, host
    response = await client.get("/", headers={"Host": "rebound.example:8090"})
    assert response.status == 403
    assert "answers only to a loopback host name" in await response.text()


async def test_every_stored_value_is_escaped(store: Store, client: Client) -> None:
    evil = "<script>alert(1)</script>"
    run = await add_run(store, workflow=f"/w/{evil}.py:flow")
    await store.save_step(
        model.StepRecord(
            run.id,
            0,
            evil,
            model.StepKind.AGENT,
            status=model.StepStatus.FAILED,
            error={"type": "X", "message": evil, "retryable": False},
            started_at=1.0,
        )
    )
    await store.append_transcript(
        [
            model.TranscriptChunk(
                run.id,
                0,
                evil,
                1,
                model.TranscriptStream.STDOUT,
                '{"type":"assistant","message":{"content":[{"type":"text","text":"' + evil + '"}]}}',
                1.0,
            ),
            model.TranscriptChunk(run.id, 0, evil, 1, model.TranscriptStream.STDERR, evil, 1.0),
        ]
    )
    for path in ("/", f"/runs/{run.id}", f"/?workflow={evil}"):
        page = await (await client.get(path)).text()
        assert "<script" not in page, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, path


async def test_a_secret_a_step_printed_is_in_no_page(store: Store, client: Client) -> None:
    """The transcript shown is the stored one, redacted as the engine stored it."""
    said = '{"type":"assistant","message":{"content":[{"type":"text","text":"the key is ' + FAKE_KEY + '"}]}}'
    provider = RecordingProvider(output={"plan": [("stdout", said), ("stderr", f"ANTHROPIC_API_KEY={FAKE_KEY}")]})
    run = await store.create_run(
        model.RunRecord(id=model.new_id(), workflow=f"{WORKFLOWS}:linear", input={"steps": ["plan"]})
    )
    await Worker(store, lambda r: Runner(store, provider), lease_s=5).run(until_idle=True)
    pages = [await (await client.get(path)).text() for path in ("/", f"/runs/{run.id}", "/sandboxes")]
    assert "assistant: the key is " + REDACTED in pages[1]
    assert find_leaks([FAKE_KEY, FAKE_KEY[:24]], *pages) == []


async def test_a_store_that_fails_answers_503_with_one_line(store: Store, client: Client) -> None:
    await store.close()  # every call now fails as a store that went away does
    try:
        response = await client.get("/")
        assert response.status == 503
        page = await response.text()
        assert "the store failed: the " in page
        assert "Traceback" not in page
    finally:
        await store.open()


async def test_a_running_run_is_on_the_live_page_and_cancel_asks_its_worker(store: Store, client: Client) -> None:
    run = await add_run(store, backend="k8s")
    claimed = await store.claim_run("elsewhere:4242:w", 30.0, run_id=run.id)
    assert claimed is not None
    await store.save_step(model.StepRecord(run.id, 0, "plan", model.StepKind.AGENT, started_at=claimed.created_at))
    live = await (await client.get("/sandboxes")).text()
    assert f'href="/runs/{run.id}"' in live
    assert "0 plan" in live
    assert f"ironflow.io/run-id={run.id}" in live  # the pods' selector, as ps shows it
    page = await (await client.get(f"/runs/{run.id}")).text()
    assert '<meta http-equiv="refresh" content="5">' in page
    response = await client.post(f"/runs/{run.id}/cancel", data={"csrf": csrf_of(page, "cancel")})
    assert response.status == 200
    assert "cancel requested" in await response.text()
    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.cancel_requested) == (model.RunStatus.RUNNING, True)
