"""The in-cluster Sandbox Router's application over a real runtime (the pod's main process, run on
this host with its token FIFO): the caller's token checked before anything else (port-forward
callers on loopback admitted), the router's own token on the request in its place, upstream's
answers for what is no sandbox, and a route forgotten when its runtime does not answer or no
longer knows the router's token. The cluster's routes (which pods are sandboxes, the delivery by
exec) are ``judge``'s unit tests and the real node's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from tests.sessions.integration.test_runtime_token_fifo import Pod, pod  # noqa: F401 - the fixture

from ironflow.sandbox_router.cluster_app import build_cluster_app
from ironflow.secrets import Secret
from ironflow.sessions.routes import NotRoutable, Route, RouteTarget

CALLER = "the-callers-token-0123456789abcdef"
RUNTIME = "the-routers-own-token-for-this-pod"


class PodRoutes:
    """The routes to one runtime: ``sbx`` is it (its token delivered here), ``db`` is no sandbox,
    ``gone`` nothing, ``down`` an address where nothing listens; what was forgotten is kept."""

    def __init__(self, runtime: Pod) -> None:
        self.pod = runtime
        self.forgotten: list[str] = []
        assert runtime.deliver(RUNTIME, workspace=str(runtime.home / "workspace")) is True

    async def route(self, target: RouteTarget) -> Route:
        if target.name == "db":
            raise NotRoutable("agents/db is not a sandbox: the router reaches sandboxes only")
        if target.name == "gone":
            raise NotRoutable("no sandbox agents/gone", 404)
        if target.name == "down":
            return Route("http://127.0.0.1:1", Secret(RUNTIME))
        if target.name == "stale":
            return Route(self.pod.url, Secret("a-token-the-runtime-never-got"))
        return Route(self.pod.url, Secret(RUNTIME) if target.port == 8888 else None)

    def forget(self, target: RouteTarget) -> None:
        self.forgotten.append(target.name)

    async def aclose(self) -> None:
        """Nothing is held."""


@contextlib.asynccontextmanager
async def _router(routes: PodRoutes, *, trust_loopback: bool) -> AsyncIterator[str]:
    runner = web.AppRunner(build_cluster_app(routes, Secret(CALLER), trust_loopback=trust_loopback))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _call(url: str, name: str, *, token: str | None = CALLER, **headers: str) -> tuple[int, object]:
    sent = {"X-Sandbox-ID": name, "X-Sandbox-Namespace": "agents", **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(url + "/execute", json={"command": "echo routed"}, headers=sent) as answer,
    ):
        return answer.status, await answer.json(content_type=None)


async def test_a_network_caller_needs_the_routers_token_and_the_runtime_gets_the_routers_own(pod: Pod) -> None:  # noqa: F811
    routes = PodRoutes(pod)
    async with _router(routes, trust_loopback=False) as url:
        assert await _call(url, "sbx", token=None) == (401, {"detail": "Missing or invalid Authorization header."})
        assert await _call(url, "sbx", token="guess") == (401, {"detail": "Invalid token."})
        assert await _call(url, "sbx", token=RUNTIME) == (401, {"detail": "Invalid token."})
        status, body = await _call(url, "sbx")
    assert status == 200
    assert isinstance(body, dict)
    assert (body["stdout"], body["exit_code"]) == ("routed\n", 0)


async def test_a_port_forward_caller_on_loopback_is_admitted_without_a_token(pod: Pod) -> None:  # noqa: F811
    async with _router(PodRoutes(pod), trust_loopback=True) as url:
        status, body = await _call(url, "sbx", token=None)
    assert status == 200
    assert isinstance(body, dict)
    assert body["stdout"] == "routed\n"


@pytest.mark.parametrize(
    ("name", "headers", "answer"),
    [
        ("db", {}, (403, {"detail": "agents/db is not a sandbox: the router reaches sandboxes only"})),
        ("gone", {}, (404, {"detail": "no sandbox agents/gone"})),
        ("sbx", {"X-Sandbox-Pod-IP": "127.0.0.1"}, (400, {"detail": "Invalid target IP address."})),
        ("Not_A_Label", {}, (400, {"detail": "Invalid sandbox ID format."})),
        ("sbx", {"X-Sandbox-Port": "0"}, (400, {"detail": "Invalid port format."})),
    ],
)
async def test_what_is_no_sandbox_gets_upstreams_answer_and_no_connection(
    pod: Pod,  # noqa: F811
    name: str,
    headers: dict[str, str],
    answer: tuple[int, object],
) -> None:
    async with _router(PodRoutes(pod), trust_loopback=False) as url:
        assert await _call(url, name, **headers) == answer


async def test_a_route_is_forgotten_when_its_runtime_does_not_answer_or_lost_the_token(pod: Pod) -> None:  # noqa: F811
    routes = PodRoutes(pod)
    async with _router(routes, trust_loopback=False) as url:
        down = await _call(url, "down")
        stale = await _call(url, "stale")
    assert down == (502, {"detail": "Could not connect to the backend sandbox: down"})
    assert stale[0] == 401  # the runtime's own answer, passed on
    assert routes.forgotten == ["down", "stale"]


async def test_another_port_gets_no_runtime_token(pod: Pod) -> None:  # noqa: F811
    """A port other than the runtime's is the sandbox's own server: it never sees the router's token
    (here the runtime itself stands in for that server, and refuses the token-less request)."""
    async with _router(PodRoutes(pod), trust_loopback=False) as url:
        status, _ = await _call(url, "sbx", **{"X-Sandbox-Port": "9000"})
    assert status == 401
