"""Pod latency on a real node (kubelet, containerd, runc, gVisor), ironflow against a bare pod.

What it measures, on one node started by ``ironflow.testing.realnode.RealNodeEnv``:

* ``bare``: a pod of the runner image running ``true``, created with the API and watched to
  ``Succeeded`` (no ironflow), then deleted: the floor a cluster gives.
* ``ironflow``: the same command through ``PodRun`` (ironflow's hardened, restricted pod: read-only
  root, no capabilities, seccomp, non-root; its input ConfigMap, its watch, its log read and its
  cleanup), from ``run()`` to its result.
* ``agent``: an offline agent step by the product's path (``K8sEphemeralProvider`` +
  ``StepRunner``): the real Claude Code CLI in the runner image, through the auth proxy deployed
  from its image behind its Service (as ``tests/fakes/real_node_proxy.py`` deploys it for the
  real-node tests), to the offline model server (a pod of the worker image, one text reply), from
  ``run()`` to its result (token issue and revocation, the pod, Claude Code's own start and turn,
  the log read, the cleanup). Its peer is a **bare agent pod**: the same image and runtime running
  the same ``claude`` command line straight at the model server's Service with the key in its
  environment, created with the API and watched to ``Succeeded`` (no token, no proxy hop, no log
  read, no cleanup in the figure; only what PSA ``restricted`` and the image need: non-root,
  seccomp, no capabilities; root file system writable, so no volumes), so the ratio is ironflow's
  own overhead. The bare ``true`` pod stays as a second, floor-only row (``agent_true``): it
  leaves Claude Code's start and turn on ironflow's side, so it carries no target. No
  NetworkPolicies: their enforcement is the tests', not this figure's.
* ``session``: ``true`` in an open Kubernetes session (runc), its pod running the session runtime
  as its main process, reached over HTTP at the pod's IP as a worker pod reaches it (this process's
  loop thread inside the node's network namespace); its peer is a bare ``pods/exec`` of ``true``
  into the same pod, measured in alternation. Target: ≤ 1.5×. A third column, no target, is the
  same command through the exec fallback (``transport="exec"``: a Python start per request).
* ``router``: ``POST /execute`` of ``true`` (agent-sandbox's runtime API, what its SDK sends) to an
  open session's runtime through the in-cluster Sandbox Router (``ironflow manifests
  --sandbox-router``, its pod from the worker image, at its Service's address, with its token: the
  SDK's direct mode), against the same request straight to the pod's IP with the session's own
  token (the SDK's in-cluster mode), in alternation, over kept-alive connections from inside the
  node's network. Target: the router adds ≤ 5 ms p50.

Both for runc and for RuntimeClass ``gvisor``, p50 of ``--count`` (default 20) runs each, in
alternation so load drifts hit both. Target: ironflow ≤ 1.2× its peer (the bare pod; for the
agent step, the bare agent pod). Prints a table, the load average, and a last line
``RESULT runc_ratio=… runc_bare_p50_ms=… runc_ironflow_p50_ms=… gvisor_ratio=… gvisor_bare_p50_ms=…
gvisor_ironflow_p50_ms=… runc_agent_ratio=… runc_agent_bare_p50_ms=… runc_agent_p50_ms=…
runc_agent_true_ratio=… runc_agent_true_p50_ms=… gvisor_agent_ratio=… gvisor_agent_bare_p50_ms=…
gvisor_agent_p50_ms=… gvisor_agent_true_ratio=… gvisor_agent_true_p50_ms=… session_ratio=…
session_exec_p50_ms=… session_http_p50_ms=… session_fallback_p50_ms=… session_fallback_ratio=…
router_direct_p50_ms=… router_p50_ms=… router_added_ms=… node_start_s=… loadavg_1m=…``
(``agent_bare`` is the bare agent pod, ``agent_true`` the bare ``true`` pod); ``--rows session``
measures only the session row (the runner image alone), ``--rows router`` the router row (the
runner and worker images).

Needs ``scripts/kube-testenv build --node`` and ``scripts/images build`` (runner, auth-proxy, worker).
Run: ``python benchmarks/real_node.py [--count N] [--rows pods,agent,session,router]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ironflow.cluster import image_builds
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as k8s
from ironflow.kube import pod_status
from ironflow.secrets import Secret
from ironflow.sessions import OpenOptions
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing import images, router_deploy
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
TARGET = 1.2
SESSION_TARGET = 1.5
ROUTER_TARGET_MS = 5.0
ROWS = ("pods", "agent", "session", "router")
IMAGES = ("runner", "auth-proxy", "worker")
RUNTIMES = (None, "gvisor")


def _bare_pod(
    name: str, image: str, runtime: str | None, command: str = "true", env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The smallest pod PSA restricted admits: what any user would write by hand."""
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", command],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if runtime:
        spec["runtimeClassName"] = runtime
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def bare(
    api: k8s.KubeApi,
    ns: str,
    image: str,
    runtime: str | None,
    *,
    command: str = "true",
    env: dict[str, str] | None = None,
    expect: str | None = None,
) -> float:
    """Create → ``Succeeded`` of a bare pod running ``command``; its log (read after the clock
    stops) must hold ``expect``."""
    name = f"bare-{uuid.uuid4().hex[:8]}"
    start = time.perf_counter()
    await api.create(k8s.PODS, ns, _bare_pod(name, image, runtime, command, env))
    while True:
        pod = await api.get(k8s.PODS, ns, name)
        phase = (pod.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            break
        await asyncio.sleep(0.05)
    elapsed = (time.perf_counter() - start) * 1000
    if expect is not None or phase != "Succeeded":
        log = await api.read_log(ns, name)
        assert phase == "Succeeded", f"{name}: {phase}: {log[-2000:]}"
        assert expect is None or expect in log, f"{name}: {log[-2000:]}"
    await api.delete(k8s.PODS, ns, name)
    return elapsed


def _claude_command(step: AgentConfig, provider: K8sEphemeralProvider) -> str:
    """The ``sh -c`` line ironflow's agent pod runs for ``step`` (the same ``claude`` argv)."""
    pod = provider.manifests(step, proxy_token="ifap_" + "0" * 40)[-1]
    (container,) = (c for c in pod["spec"]["containers"] if c["name"] == "claude-code")
    line: str = container["command"][-1]
    assert line.startswith("'claude' "), line
    return line


async def ironflow(api: k8s.KubeApi, ns: str, image: str, runtime: str | None) -> float:
    run = PodRun("bench", image, "true").namespace(ns).restricted(read_only_root=True).timeout(120)
    if runtime:
        run = run.runtime_class(runtime)
    start = time.perf_counter()
    out = await run.run(api)
    assert out.success, out
    return (time.perf_counter() - start) * 1000


async def measure(env: RealNodeEnv, image: str, count: int) -> dict[str, dict[str, list[float]]]:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    env.create_namespace(ns, labels=RESTRICTED)
    api = await k8s.KubeApi.connect(env.cluster_config())
    out: dict[str, dict[str, list[float]]] = {}
    try:
        for runtime in RUNTIMES:
            key = runtime or "runc"
            out[key] = {"bare": [], "ironflow": []}
            await bare(api, ns, image, runtime)  # warm-up: first container of the runtime
            await ironflow(api, ns, image, runtime)
            for _ in range(count):
                out[key]["bare"].append(await bare(api, ns, image, runtime))
                out[key]["ironflow"].append(await ironflow(api, ns, image, runtime))
    finally:
        await api.close()
    return out


async def measure_agent(env: RealNodeEnv, refs: dict[str, str], count: int) -> dict[str, dict[str, list[float]]]:
    """The ``agent`` rows: the proxy and the model server deployed once, then bare ``true`` and an
    agent step in alternation, per runtime."""
    sys.path.insert(0, str(ROOT))  # the real-node tests' deployment of the proxy and the model server
    from tests.fakes import real_node_proxy as rp
    from tests.k8s.real_node.test_real_node_worker import REPLY, _model_server

    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    model_ns = f"md-{suffix}"
    key = Secret("sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex)
    out: dict[str, dict[str, list[float]]] = {}
    with rp.cluster_namespaces(env, config, model_ns):
        env.apply_objects(_model_server(model_ns, refs["worker"], key))
        upstream = f"http://fake-model.{model_ns}"
        proxy = rp.deploy_auth_proxy(env, config, admin_key=rp.new_admin_key(), upstream=upstream)
        api = await k8s.KubeApi.connect(env.cluster_config())
        try:

            async def serving() -> bool:
                return "serving" in await api.read_log(model_ns, "fake-model")

            await eventually(serving, limit_s=180, interval_s=0.5, what="the offline model server serving")
            step = AgentConfig("Say hello.").account_lease(AccountLease("acct-1", "ANTHROPIC_API_KEY", key))
            # The fair peer: the same claude line, straight at the model server with the key.
            peer_env = {
                "ANTHROPIC_BASE_URL": upstream,
                "ANTHROPIC_API_KEY": key.reveal(),
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",  # as ironflow's pod: no other traffic
            }
            claude = _claude_command(
                step.scoped("bench", "agent"), K8sEphemeralProvider.sandboxed(refs["runner"]).auth_proxy(proxy.url)
            )
            for runtime in RUNTIMES:
                provider = K8sEphemeralProvider.sandboxed(refs["runner"]).namespace(config.namespace)
                provider = provider.auth_proxy(proxy.url).timeout(300)
                if runtime:
                    provider = provider.runtime_class(runtime)

                async def agent(settings: ProviderSettings = provider.settings) -> float:
                    scoped = step.scoped(f"bench-{uuid.uuid4().hex[:8]}", "agent")
                    result, took = await rp.run_step(env, proxy, settings, api, scoped)
                    assert result.text == REPLY, result
                    return took * 1000

                async def peer(runtime: str | None = runtime) -> float:
                    return await bare(
                        api, config.namespace, refs["runner"], runtime, command=claude, env=peer_env, expect=REPLY
                    )

                row = runtime or "runc"
                out[row] = {"bare": [], "ironflow": [], "true": []}
                await bare(api, config.namespace, refs["runner"], runtime)  # warm-up, as above
                await peer()
                await agent()
                for _ in range(count):
                    out[row]["true"].append(await bare(api, config.namespace, refs["runner"], runtime))
                    out[row]["bare"].append(await peer())
                    out[row]["ironflow"].append(await agent())
        finally:
            await api.close()
    return out


async def measure_session(env: RealNodeEnv, image: str, count: int) -> dict[str, list[float]]:
    """A command in an open session over HTTP, the same through the exec fallback, and a bare exec of
    ``true`` into the session's pod, in alternation, from inside the node's network."""
    sys.path.insert(0, str(ROOT))  # the real-node tests' way into the node's network namespace
    from tests.fakes.node_network import inside_node_network

    ns = f"bench-{uuid.uuid4().hex[:6]}"
    env.create_namespace(ns, labels=RESTRICTED)
    provider = K8sEphemeralProvider.sandboxed(image).namespace(ns).image_pull_policy("Never")
    out: dict[str, list[float]] = {"exec": [], "http": [], "fallback": []}
    with inside_node_network(env):
        api = await k8s.KubeApi.connect(env.cluster_config())
        try:
            async with (
                provider.sessions(api=api, transport="http") as http,
                provider.sessions(api=api, transport="exec") as fallback,
            ):
                sandbox = await http.open(OpenOptions(ttl=600))
                via_exec = await fallback.connect(sandbox.id)

                async def bare() -> float:
                    start = time.perf_counter()
                    done = await api.exec(ns, sandbox.id, ("true",), container="sandbox")
                    assert done.exit_code == 0, done
                    return (time.perf_counter() - start) * 1000

                async def command(handle: Any) -> float:
                    start = time.perf_counter()
                    ran = await handle.commands.run(["true"])
                    assert ran.exit_code == 0, ran
                    return (time.perf_counter() - start) * 1000

                for _ in range(3):  # warm-up: the connections, the pod's first execs
                    await bare(), await command(sandbox), await command(via_exec)
                for _ in range(count):
                    out["exec"].append(await bare())
                    out["http"].append(await command(sandbox))
                    out["fallback"].append(await command(via_exec))
                await via_exec.disconnect()
                await fallback.release()
                await sandbox.close()
        finally:
            await api.close()
    return out


async def measure_router(env: RealNodeEnv, refs: dict[str, str], count: int) -> dict[str, list[float]]:
    """``POST /execute`` of ``true`` to an open session's runtime, straight to its pod and through the
    in-cluster router, in alternation, from inside the node's network."""
    import aiohttp

    sys.path.insert(0, str(ROOT))
    from tests.fakes.node_network import inside_node_network

    ns = f"bench-{uuid.uuid4().hex[:6]}"
    env.create_namespace(ns, labels=RESTRICTED)
    provider = K8sEphemeralProvider.sandboxed(refs["runner"]).namespace(ns).image_pull_policy("Never")
    router_token = secrets.token_urlsafe(32)
    out: dict[str, list[float]] = {"direct": [], "router": []}
    with inside_node_network(env):
        api = await k8s.KubeApi.connect(env.cluster_config())
        try:
            async with (
                router_deploy.deployed(env, api, ns, refs["worker"], router_token) as router_url,
                provider.sessions(api=api, transport="http") as sessions,
                aiohttp.ClientSession() as http,
            ):
                sandbox = await sessions.open(OpenOptions(ttl=600))
                url, token = sessions.route(sandbox.id)

                async def ready() -> bool:  # the router routes to Ready pods only; a session opens on Running
                    return pod_status.pod_ready(await api.get(k8s.PODS, ns, sandbox.id))

                await eventually(ready, limit_s=60, interval_s=0.2, what=f"session pod {sandbox.id} Ready")
                direct = (url, {"Authorization": f"Bearer {token.reveal()}"})
                routed = (router_url, {"Authorization": f"Bearer {router_token}", "X-Sandbox-ID": sandbox.id,
                                       "X-Sandbox-Namespace": ns})  # fmt: skip

                async def execute(where: tuple[str, dict[str, str]]) -> float:
                    start = time.perf_counter()
                    async with http.post(where[0] + "/execute", json={"command": "true"}, headers=where[1]) as answer:
                        done = await answer.json()
                    assert answer.status == 200, (answer.status, done)
                    assert done["exit_code"] == 0, done
                    return (time.perf_counter() - start) * 1000

                for _ in range(3):  # warm-up: the connections, the router's token delivery
                    await execute(direct), await execute(routed)
                for _ in range(count):
                    out["direct"].append(await execute(direct))
                    out["router"].append(await execute(routed))
                await sandbox.close()
        finally:
            await api.close()
    return out


def _router_rows(runs: dict[str, list[float]]) -> list[str]:
    """Print the router row; its RESULT fields."""
    d, r = statistics.median(runs["direct"]), statistics.median(runs["router"])
    verdict = "met" if r - d <= ROUTER_TARGET_MS else "NOT met"
    print(
        f"{'runc router':17} {d:12.1f} {r:16.1f} {r / d:7.2f}  {verdict}"
        f" (+{r - d:.1f} ms, target ≤ +{ROUTER_TARGET_MS:.0f} ms)"
    )
    return [f"router_direct_p50_ms={d:.1f}", f"router_p50_ms={r:.1f}", f"router_added_ms={r - d:.1f}"]


def _session_rows(runs: dict[str, list[float]]) -> list[str]:
    """Print the session row; its RESULT fields."""
    b, i, f = (statistics.median(runs[k]) for k in ("exec", "http", "fallback"))
    verdict = "met" if i / b <= SESSION_TARGET else "NOT met"
    print(f"{'runc session':17} {b:12.1f} {i:16.1f} {i / b:7.2f}  {verdict} (target ≤ {SESSION_TARGET}×)")
    print(f"{'runc session/exec':17} {b:12.1f} {f:16.1f} {f / b:7.2f}  the exec fallback, no target")
    return [
        f"session_ratio={i / b:.2f}",
        f"session_exec_p50_ms={b:.1f}",
        f"session_http_p50_ms={i:.1f}",
        f"session_fallback_p50_ms={f:.1f}",
        f"session_fallback_ratio={f / b:.2f}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--rows", default=",".join(ROWS), help="which rows to measure (default: all)")
    args = parser.parse_args(argv)
    chosen = set(args.rows.split(","))
    if not chosen or chosen - set(ROWS):
        print(f"--rows takes a comma list of {', '.join(ROWS)}, got '{args.rows}'", file=sys.stderr)
        return 2
    needed = IMAGES if chosen & {"pods", "agent"} else ("runner", "worker") if "router" in chosen else ("runner",)
    archives = {name: images.archive_path(ROOT, name) for name in needed}
    missing = [name for name, path in archives.items() if not path.exists()]
    if missing:
        print(f"images not built: {', '.join(missing)}: bash scripts/images build", file=sys.stderr)
        return 2
    refs = {name: image_builds.local_reference(image_builds.IMAGES[name].reference) for name in needed}
    started = time.perf_counter()
    results: dict[str, dict[str, list[float]]] = {}
    agents: dict[str, dict[str, list[float]]] = {}
    with RealNodeEnv(images=list(archives.values())) as env:
        node_start = time.perf_counter() - started
        if "pods" in chosen:
            results = asyncio.run(measure(env, refs["runner"], args.count))
        if "agent" in chosen:
            agents = asyncio.run(measure_agent(env, refs, args.count))
        session = asyncio.run(measure_session(env, refs["runner"], args.count)) if "session" in chosen else None
        router = asyncio.run(measure_router(env, refs, args.count)) if "router" in chosen else None
    load = os.getloadavg()[0]
    print(f"{'row':17} {'peer p50 ms':>12} {'ironflow p50 ms':>16} {'ratio':>7}  target ≤ {TARGET}× (pods, agent)")
    fields = []
    for kind, rows in (("", results), ("agent", agents)):
        for runtime, runs in rows.items():
            b, i = statistics.median(runs["bare"]), statistics.median(runs["ironflow"])
            ratio = i / b
            verdict = "met" if ratio <= TARGET else "NOT met"
            print(f"{(runtime + ' ' + kind).strip():17} {b:12.0f} {i:16.0f} {ratio:7.2f}  {verdict}")
            if kind:
                t = statistics.median(runs["true"])
                print(f"{runtime + ' agent/true':17} {t:12.0f} {i:16.0f} {i / t:7.2f}  floor only (no target)")
                fields += [f"{runtime}_agent_ratio={ratio:.2f}", f"{runtime}_agent_bare_p50_ms={b:.0f}"]
                fields += [f"{runtime}_agent_p50_ms={i:.0f}", f"{runtime}_agent_true_ratio={i / t:.2f}"]
                fields.append(f"{runtime}_agent_true_p50_ms={t:.0f}")
            else:
                fields += [f"{runtime}_ratio={ratio:.2f}", f"{runtime}_bare_p50_ms={b:.0f}"]
                fields.append(f"{runtime}_ironflow_p50_ms={i:.0f}")
    if session is not None:
        fields += _session_rows(session)
    if router is not None:
        fields += _router_rows(router)
    print(f"node start (images loaded): {node_start:.1f} s; {args.count} runs each; load average {load:.2f}")
    print("RESULT " + " ".join([*fields, f"node_start_s={node_start:.1f}", f"loadavg_1m={load:.2f}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
