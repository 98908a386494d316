"""The kubelet's part on a real control plane, played by the test: pod phases, logs and
pod scripts in a namespace kwok leaves alone (``MANUAL_NAMESPACE_PREFIX``).

Why: the contract suite drives pods step by step (``set_pod_phase``), which kwok's
automatic stages cannot. Here, as a kubelet would, the test patches ``pods/status`` through
the real apiserver, and kwok still serves the logs (through ``Logs`` rules) and finishes
graceful deletions. :class:`KubeletControl` is the ``ClusterControl`` of
``tests/fakes/kubecase.py``, as ``ServerControl`` is over ``KubeTestServer``.

Also the ``kube_env`` session fixture: one cluster per test session, skipped with the reason
when the binaries are not built. It lives in ``tests/fakes/``, not in ``ironflow.testing``,
because it imports pytest; ``tests/fakes/kube_fixtures.py`` (a plugin of ``tests/conftest.py``)
imports ``kube_env`` and :func:`manual_namespace` from here for the ``kube`` fixture's real
backend, and unit tests import :func:`pod_status` directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from tests.fakes import kubelet_problems

from ironflow.kube import api
from ironflow.testing import _kwok_stages as stages
from ironflow.testing.kube import PodScript
from ironflow.testing.kubeenv import NODE_NAME, KubeEnv, KubeEnvError, KubeEnvNotAvailable
from ironflow.testing.polling import eventually

__all__ = ["KubeletControl", "PodGone", "kube_env", "manual_namespace", "pod_status"]

_namespaces = itertools.count(1)
#: PodNodeSelector annotation that matches no node: pods in manual namespaces stay unscheduled
#: (so, as on the test server, a Pending pod is deleted at once) until the control binds them.
UNSCHEDULABLE: Final = {"scheduler.alpha.kubernetes.io/node-selector": "kubeenv.ironflow.io/never=true"}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_status(pod: dict[str, Any], phase: str, *, exit_code: int | None, reason: str | None) -> dict[str, Any]:
    """The status a kubelet would report for ``pod`` in ``phase`` (pure).

    >>> pod_status({"spec": {"containers": [{"name": "m", "image": "i"}]}}, "Failed", exit_code=None,
    ...            reason=None)["containerStatuses"][0]["state"]["terminated"]["exitCode"]
    1
    """
    now = _now()
    containers = pod.get("spec", {}).get("containers", [])
    status: dict[str, Any] = {"phase": phase, "startTime": pod.get("status", {}).get("startTime") or now}
    if phase == "Pending":
        return {"phase": "Pending"}
    running = phase == "Running"
    status["hostIP"] = "127.0.0.1"
    status["podIP"] = "10.0.0.2"
    status["conditions"] = [
        {"type": t, "status": "True" if running else "False", "lastTransitionTime": now}
        for t in ("Ready", "ContainersReady")
    ]
    if running:
        state: dict[str, Any] = {"running": {"startedAt": now}}
    else:
        code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
        state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": status["startTime"],
                "finishedAt": now,
            }
        }
    status["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": running,
            "restartCount": 0,
            "state": state,
        }
        for c in containers
    ]
    if reason:
        status["reason"] = reason
    if reason == "DeadlineExceeded":  # the kubelet's words
        status["message"] = "Pod was active on the node longer than the specified deadline"
    return status


class PodGone(Exception):
    """The pod the control was asked to move was deleted (a 404)."""


class KubeletControl:
    """``ClusterControl`` for one manual namespace on a :class:`KubeEnv`."""

    def __init__(self, env: KubeEnv, namespace: str) -> None:
        if not namespace.startswith(stages.MANUAL_NAMESPACE_PREFIX):
            raise ValueError(
                f"namespace {namespace!r} must start with {stages.MANUAL_NAMESPACE_PREFIX!r} (kwok ignores those)"
            )
        self.env = env
        self.namespace = namespace
        self._session: aiohttp.ClientSession | None = None
        self._logs: dict[str, Path] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._scripts: list[PodScript] = []
        self._job_scripts: list[PodScript] = []
        self._seen: set[str] = set()

    async def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            assert self.env.workdir is not None
            ctx = ssl.create_default_context(cafile=str(self.env.workdir / "ca.crt"))
            ctx.load_cert_chain(str(self.env.workdir / "admin.crt"), str(self.env.workdir / "admin.key"))
            self._session = aiohttp.ClientSession(self.env.server, connector=aiohttp.TCPConnector(ssl=ctx))
        return self._session

    async def _get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        http = await self._http()
        async with http.get(f"/api/v1/namespaces/{namespace}/pods/{name}") as resp:
            if resp.status == 404:
                raise PodGone(f"pod {namespace}/{name} is gone")
            resp.raise_for_status()
            return dict(await resp.json())

    async def _bind(self, namespace: str, name: str) -> dict[str, Any]:
        """Bind the pod to kwok's node (the scheduler's part), so the apiserver can reach its
        "kubelet" for logs; returns the pod."""
        pod = await self._get_pod(namespace, name)
        if pod.get("spec", {}).get("nodeName"):
            return pod
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
        }
        http = await self._http()
        async with http.post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", json=body) as resp:
            if resp.status == 404:
                raise PodGone(f"pod {namespace}/{name} is gone")
            if resp.status >= 300:
                raise RuntimeError(f"binding {namespace}/{name} failed: {resp.status} {await resp.text()}")
        if name not in self._logs:  # a started container has a (possibly empty) log
            self._logs[name] = await asyncio.to_thread(self.env.set_pod_log, namespace, name, "")
        return await self._get_pod(namespace, name)

    async def set_pod_phase(
        self, namespace: str, name: str, phase: str, *, exit_code: int | None = None, reason: str | None = None
    ) -> None:
        """Patch ``pods/status`` as a kubelet would (binding the pod first unless Pending)."""
        pod = await self._get_pod(namespace, name) if phase == "Pending" else await self._bind(namespace, name)
        body = {"status": pod_status(pod, phase, exit_code=exit_code, reason=reason)}
        http = await self._http()
        headers = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", json=body, headers=headers) as resp:
            if resp.status == 404:
                raise PodGone(f"pod {namespace}/{name} is gone")
            if resp.status >= 300:
                raise RuntimeError(f"status patch of {namespace}/{name} failed: {resp.status} {await resp.text()}")

    async def report_problem(self, namespace: str, name: str, reason: str, message: str) -> None:
        """Bind the pod, patch the status its kubelet writes for ``reason`` and record its events.

        Not ``Unschedulable``: in a manual namespace the control plays the scheduler by binding;
        the real scheduler writes that reason in a kwok-driven namespace (a node selector no node has).
        """
        if reason == "Unschedulable":
            raise ValueError("the real scheduler reports Unschedulable: use a kwok-driven namespace")
        pod = await self._bind(namespace, name)
        http = await self._http()
        for kind, why, said in kubelet_problems.problem_events(reason, message):
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{name}."},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": name,
                    "namespace": namespace,
                    "uid": pod["metadata"]["uid"],
                },
                "type": kind,
                "reason": why,
                "message": said,
                "count": 1,
                "firstTimestamp": _now(),
                "lastTimestamp": _now(),
                "source": {"component": "kubelet", "host": NODE_NAME},
            }
            async with http.post(f"/api/v1/namespaces/{namespace}/events", json=event) as resp:
                if resp.status >= 300:
                    raise RuntimeError(f"event of {namespace}/{name} refused: {resp.status} {await resp.text()}")
        body = {"status": kubelet_problems.problem_status(pod, reason, message)}
        headers = {"Content-Type": "application/merge-patch+json"}
        async with http.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", json=body, headers=headers) as resp:
            if resp.status >= 300:
                raise RuntimeError(f"status patch of {namespace}/{name} failed: {resp.status} {await resp.text()}")

    async def set_log(self, namespace: str, pod: str, text: str) -> None:
        """Serve ``text`` as the pod's log (kwok ``Logs`` rule); wait until the API serves it."""
        await self._bind(namespace, pod)
        self._logs[pod] = await asyncio.to_thread(self.env.set_pod_log, namespace, pod, text)
        await self._await_log(namespace, pod, text)

    async def append_log(self, namespace: str, pod: str, text: str) -> None:
        """Append to the pod's log file; kwok's follow streams see it."""
        path = self._logs.get(pod)
        if path is None:
            await self.set_log(namespace, pod, text)
            return
        with path.open("a") as f:
            f.write(stages.cri_log(text))

    async def _await_log(self, namespace: str, pod: str, text: str) -> None:
        """Until the API serves ``text`` (kwok learns of a new ``Logs`` rule through its watch)."""
        http = await self._http()

        async def served() -> bool:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"/api/v1/namespaces/{namespace}/pods/{pod}/log") as resp:
                    return resp.status == 200 and (await resp.text()) == text
            return False

        await eventually(served, interval_s=0.05, what=f"kwok to serve the log of {namespace}/{pod}")

    async def script_pods(self, script: PodScript) -> None:
        """Run every new pod of the namespace that matches ``script`` as it says."""
        self._scripts.insert(0, script)
        self._start_watching()

    async def script_jobs(self, script: PodScript) -> None:
        """Run the pods the real Job controller makes for every new Job whose name starts with
        ``script.name_prefix`` (its labels: the Job's) as ``script`` says."""
        self._job_scripts.insert(0, script)
        self._start_watching()

    def _start_watching(self) -> None:
        if not self._tasks:
            self._spawn(self._watch_new_pods())

    def _script_for(self, pod: dict[str, Any]) -> PodScript | None:
        owners = pod["metadata"].get("ownerReferences") or []
        job = next((o["name"] for o in owners if o.get("kind") == "Job"), None)
        if job is not None:
            as_job = {"metadata": {"name": job, "labels": pod["metadata"].get("labels") or {}}}
            return next((s for s in self._job_scripts if s.matches(as_job)), None)
        return next((s for s in self._scripts if s.matches(pod)), None)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch_new_pods(self) -> None:
        http = await self._http()
        while True:
            async with http.get(f"/api/v1/namespaces/{self.namespace}/pods") as resp:
                items = (await resp.json()).get("items", [])
            for pod in items:
                uid = pod["metadata"]["uid"]
                if uid in self._seen:
                    continue
                self._seen.add(uid)
                script = self._script_for(pod)
                if script is not None:
                    self._spawn(self._run(pod, script))
            await asyncio.sleep(0.05)

    async def _run(self, pod: dict[str, Any], script: PodScript) -> None:
        """As a kubelet: start the container (its log served before it reports Running), run it
        for ``run_for`` s, end it as the script says; ``activeDeadlineSeconds`` ends it first
        (Failed, ``DeadlineExceeded``, exit 137), as the kubelet enforces it. A pod deleted
        meanwhile is left to the deletion."""
        name = pod["metadata"]["name"]
        await asyncio.sleep(script.start_after)
        try:
            if script.log:
                await self.set_log(self.namespace, name, script.log)
            await self.set_pod_phase(self.namespace, name, "Running")
            deadline = pod.get("spec", {}).get("activeDeadlineSeconds")
            if deadline is not None and (script.run_for is None or script.run_for >= deadline):
                await asyncio.sleep(float(deadline))
                await self.set_pod_phase(self.namespace, name, "Failed", exit_code=137, reason="DeadlineExceeded")
                return
            if script.run_for is None:
                return
            await asyncio.sleep(script.run_for)
            await self.set_pod_phase(
                self.namespace, name, script.phase, exit_code=script.exit_code, reason=script.reason
            )
        except PodGone:
            return

    async def aclose(self) -> None:
        """Stop the script tasks and close the HTTP session."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None


@contextlib.asynccontextmanager
async def manual_namespace(env: KubeEnv) -> AsyncIterator[tuple[api.KubeApi, str, KubeletControl]]:
    """A fresh namespace kwok leaves alone, an admin :class:`KubeApi` and the kubelet control;
    everything is closed and the namespace deleted afterwards."""
    namespace = f"{stages.MANUAL_NAMESPACE_PREFIX}{next(_namespaces)}"
    await asyncio.to_thread(env.create_namespace, namespace, annotations=UNSCHEDULABLE)
    control = KubeletControl(env, namespace)
    kube_api = await api.KubeApi.connect(env.cluster_config())
    try:
        yield kube_api, namespace, control
    finally:
        await control.aclose()
        await kube_api.close()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(env.request, "DELETE", f"/api/v1/namespaces/{namespace}")


class _RealServerTally:
    """A pytest plugin, registered by ``kube_env``: counts the outcomes of the tests that ran
    against the real server and prints them at the end of the session."""

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if "real-apiserver" not in report.nodeid and not any(
            t in report.nodeid for t in ("test_realkube_", "test_realkro_")
        ):
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "xfailed" if hasattr(report, "wasxfail") else report.outcome
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes.items()))
        terminalreporter.write_line(f"real kube-apiserver tier: {counts or 'no tests'}")


@pytest.fixture(scope="session")
def kube_env(request: pytest.FixtureRequest) -> Iterator[KubeEnv]:
    """One real control plane for the session; skipped (with the fix) when not built."""
    try:
        env = KubeEnv()
    except KubeEnvNotAvailable as exc:
        pytest.skip(str(exc))
    request.config.pluginmanager.register(_RealServerTally(), "ironflow-real-server-tally")
    try:
        env.start()
    except KubeEnvError:  # one retry: a free port picked at start may be taken meanwhile
        env.start()
    try:
        yield env
    finally:
        env.stop()
