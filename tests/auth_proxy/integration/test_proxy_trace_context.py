"""A pod or claim step's token, issued over the admin API with the step's ``traceparent``
(``issuing.issue_step_token``, as the Kubernetes and agent-sandbox runners do), parents the real
proxy's span of each request the token makes: the run's trace reaches the proxy on every backend."""

from __future__ import annotations

import time

import aiohttp
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.fakes.spans import by_name, finished_spans

from ironflow import tracing
from ironflow.auth_proxy import AdminClient, Credential
from ironflow.auth_proxy.app import run_auth_proxy
from ironflow.auth_proxy.config import AuthProxyConfig
from ironflow.auth_proxy.issuing import issue_step_token
from ironflow.fake_model.server import FakeAnthropic, Script, TextTurn
from ironflow.secrets import Secret
from ironflow.steps import AgentConfig

__all__ = ["finished_spans"]  # the fixture, imported to be found

ADMIN = "admin-key-" + "t" * 40
CREDENTIAL = Credential("api_key", Secret("sk-ant-api03-" + "t" * 20))
MESSAGE = {"model": "claude-haiku-5-0", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}


async def test_a_token_issued_with_the_steps_traceparent_parents_the_proxys_request_spans(
    finished_spans: InMemorySpanExporter,
) -> None:
    async with FakeAnthropic(Script.of(default=TextTurn("hello"))) as fake:
        config = AuthProxyConfig(admin_key=Secret(ADMIN), upstream=fake.url)
        async with (
            run_auth_proxy(config) as proxy,
            AdminClient(proxy.url, ADMIN, credential=CREDENTIAL) as admin,
            aiohttp.ClientSession() as http,
        ):
            with tracing.span("ironflow.step", step="plan"):
                step = AgentConfig("hi", trace_context=tracing.current_traceparent())
                _, token = await issue_step_token(admin, step, "run-1", "plan", int(time.time()) + 600)
            headers = {"Authorization": f"Bearer {token.reveal()}"}  # no traceparent header of its own
            async with http.post(proxy.url + "/v1/messages", json=MESSAGE, headers=headers) as response:
                assert response.status == 200, await response.text()
    spans = finished_spans.get_finished_spans()
    (step_span,) = by_name(spans, "ironflow.step")
    (request,) = by_name(spans, "ironflow.proxy.request")
    assert request.context.trace_id == step_span.context.trace_id
    assert request.parent is not None
    assert request.parent.span_id == step_span.context.span_id
