"""On a real node: a git workspace end to end. The step's init container clones through the auth
proxy's git relay (``/r/<host>/…``, the proxy running from its built image behind its Service) from
a git host pod (git's own ``git http-backend`` behind HTTPS and Basic auth, as a forge serves smart
HTTP), the real Claude Code CLI changes files (the offline model server's scripted Bash call), the
report comes back as the change set ironflow returns, and ``push_branch`` pushes it from a pod of
its own through the proxy; the pushed commit is read back from the git host's repository. On runc
and on RuntimeClass ``gvisor`` (the step's pod and the push pod).

All under the NetworkPolicies ``ironflow manifests`` renders (agent pods reach only the proxy), plus
the operator's openings for the proxy's upstreams here (the model server, the git host). The git
host's password is given to the proxy only (the grant); the host logs which user each request
carried, so a clone that did not go through the relay (no password) is refused and fails the test,
as does a wrong or missing report or a push that did not land. The proxy trusts the git host's CA
by ``SSL_CERT_FILE`` (as an operator trusts a private CA). Skipped when the node's binaries or the
runner, auth-proxy and worker images are missing.

``ironflow exec --backend k8s`` on a git workspace takes the same path (its own pod, cloned by the
same init container), under the same policies, with no model: once through its code called here,
once as the ``ironflow`` command in a child process (inside the node's network namespace, where
the proxy's ClusterIP answers the CLI's admin client as it would on the cluster's network). A
sandbox session opened on the same workspace is reached over HTTP at the runtime its pod runs.

What it found, fixed in src: the push pod, then the exec pod, was a ``pod-run`` the rendered
policies gave no DNS or proxy; a new pod's first connections are refused while kube-router programs its policies (the
clone and push now retry a git command that could not connect); and git called the push pod's
fresh clone in a root-owned emptyDir "dubious" (``safe.directory``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
from tests.fakes import real_node_proxy as rp
from tests.fakes.node_network import inside_node_network
from tests.k8s.real_node.test_real_node_agent_step import _model_objects, _upstream_opening

from ironflow.auth_proxy.admin_client import AdminClient
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.cluster import setup
from ironflow.k8s.commands import pod_runs
from ironflow.k8s.commands.pod_runs import command_line
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.k8s.sessions.pod_sessions import K8sSessions
from ironflow.k8s.workspaces import command_pods
from ironflow.kube import api as k8s
from ironflow.secrets import Secret, find_leaks
from ironflow.sessions import OpenOptions
from ironflow.steps import AccountLease, AgentConfig
from ironflow.testing.polling import eventually
from ironflow.testing.realnode import RealNodeEnv
from ironflow.workspaces import Change, Workspace

pytestmark = pytest.mark.timeout(900)  # the node's start (images loaded) counts in the first test

ROOT: Final = Path(__file__).resolve().parents[3]

MODEL_PORT: Final = 8085
GIT_PORT: Final = 8443
USER: Final = "x-access-token"
EDITS: Final = "echo fixed >> calc.py && rm notes.txt && printf 'new\\n' > added.txt"
BRANCH: Final = "ironflow/fix-add"
#: The git host: seed a bare repository (one commit on main), then serve it over HTTPS with Basic
#: auth through ``git http-backend`` as CGI, logging each request (method, path, user, status).
SEED: Final = """
set -e
export HOME=/srv/home GIT_CONFIG_NOSYSTEM=1
mkdir -p /srv/home /srv/seed /srv/org
git init -q --bare -b main /srv/org/repo.git
cd /srv/seed
printf 'def add(a, b):\\n    return a - b\\n' > calc.py
printf 'old notes\\n' > notes.txt
git init -q -b main
git add -A
git -c user.name=seed -c user.email=seed@example.test commit -qm start
git push -q /srv/org/repo.git main
"""
SERVER: Final = r"""
const https = require("https"), fs = require("fs"), { spawn } = require("child_process");
const expected = "Basic " + Buffer.from(process.env.GIT_AUTH).toString("base64");
const log = (o) => console.log(JSON.stringify(o));
https.createServer({ cert: fs.readFileSync("/tls/tls.crt"), key: fs.readFileSync("/tls/tls.key") }, (req, res) => {
  const url = new URL(req.url, "https://git");
  const user = req.headers.authorization === expected ? process.env.GIT_AUTH.split(":")[0] : null;
  if (user === null) {
    log({ method: req.method, path: url.pathname, user, status: 401 });
    res.writeHead(401, { "WWW-Authenticate": 'Basic realm="git"' });
    res.end();
    return;
  }
  const env = {
    PATH: process.env.PATH, HOME: "/srv/home", GIT_PROJECT_ROOT: "/srv", GIT_HTTP_EXPORT_ALL: "1",
    REQUEST_METHOD: req.method, PATH_INFO: url.pathname, QUERY_STRING: url.search.slice(1),
    CONTENT_TYPE: req.headers["content-type"] || "", REMOTE_USER: user, REMOTE_ADDR: "127.0.0.1",
  };
  if (req.headers["content-length"]) env.CONTENT_LENGTH = req.headers["content-length"];
  if (req.headers["content-encoding"]) env.HTTP_CONTENT_ENCODING = req.headers["content-encoding"];
  if (req.headers["git-protocol"]) env.GIT_PROTOCOL = req.headers["git-protocol"];
  const cgi = spawn("git", ["http-backend"], { env });
  req.pipe(cgi.stdin);
  let head = Buffer.alloc(0), started = false;
  cgi.stdout.on("data", (d) => {
    if (started) { res.write(d); return; }
    head = Buffer.concat([head, d]);
    let end = head.indexOf("\r\n\r\n"), gap = 4;
    if (end < 0) { end = head.indexOf("\n\n"); gap = 2; }
    if (end < 0) return;
    started = true;
    let status = 200;
    const headers = {};
    for (const line of head.subarray(0, end).toString().split(/\r?\n/)) {
      const at = line.indexOf(":");
      const key = line.slice(0, at), value = line.slice(at + 1).trim();
      if (key.toLowerCase() === "status") status = parseInt(value, 10); else headers[key] = value;
    }
    log({ method: req.method, path: url.pathname, user, status });
    res.writeHead(status, headers);
    res.write(head.subarray(end + gap));
  });
  cgi.stdout.on("end", () => res.end());
  cgi.stderr.on("data", (d) => process.stderr.write(d));
}).listen(Number(process.env.GIT_PORT), "0.0.0.0", () => console.log("serving"));
"""


def _tls(tmp_path: Path, host: str) -> tuple[str, str, str]:
    """A CA and a certificate for ``host`` signed by it (openssl): CA PEM, cert PEM, key PEM."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "1", "-subj", "/CN=ironflow test git CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={host}")
    (tmp_path / "ext.cnf").write_text(
        f"subjectAltName=DNS:{host}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "tls.crt", "-days", "1", "-extfile", "ext.cnf")  # fmt: skip
    return tuple((tmp_path / name).read_text() for name in ("ca.crt", "tls.crt", "tls.key"))  # type: ignore[return-value]


def _git_objects(ns: str, image: str, password: Secret, cert: str, key: str) -> list[dict[str, Any]]:
    """The git host: its Secrets (Basic credential, TLS), its pod (runner image: git and node), its Service on 443."""
    argv = ["node", "-e", SERVER]
    command = SEED + "exec " + command_line(argv)
    pod = rp.sleeper_pod("git", image, ns, labels={"app": "git"}, command=command)
    spec = pod["spec"]
    (container,) = spec["containers"]
    auth = {"name": "git-auth", "key": "basic"}
    container["env"] = [
        {"name": "GIT_AUTH", "valueFrom": {"secretKeyRef": auth}},
        {"name": "GIT_PORT", "value": str(GIT_PORT)},
    ]
    container["volumeMounts"] = [{"name": "srv", "mountPath": "/srv"}, {"name": "tls", "mountPath": "/tls"}]
    spec["volumes"] = [{"name": "srv", "emptyDir": {}}, {"name": "tls", "secret": {"secretName": "git-tls"}}]

    def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "data": encoded}

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "git", "namespace": ns},
        "spec": {"selector": {"app": "git"}, "ports": [{"port": 443, "targetPort": GIT_PORT}]},
    }
    return [
        secret("git-auth", {"basic": f"{USER}:{password.reveal()}"}),
        secret("git-tls", {"tls.crt": cert, "tls.key": key}),
        service,
        pod,
    ]


async def _git(api: k8s.KubeApi, ns: str, *args: str) -> str:
    """``git`` in the git host's repository, read from inside its pod."""
    done = await api.exec(ns, "git", ("git", "--git-dir=/srv/org/repo.git", *args))
    assert done.exit_code == 0, done.stderr.decode()[-1000:]
    return done.stdout.decode()


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_an_agent_step_clones_through_the_proxy_changes_files_and_pushes_back(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path, runtime: str
) -> None:
    runner_image, worker_image = need_image["runner"], need_image["worker"]
    need_image["auth-proxy"]
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    model_ns, git_ns = f"md-{suffix}", f"gt-{suffix}"
    host = f"git.{git_ns}.svc.cluster.local"
    key = Secret("sk-ant-api03-" + uuid.uuid4().hex + uuid.uuid4().hex)
    password = Secret("ghs_" + uuid.uuid4().hex)
    ca, cert, tls_key = _tls(tmp_path, host)
    with rp.cluster_namespaces(real_node, config, model_ns, git_ns):
        real_node.apply_objects(_model_objects(model_ns, worker_image, key, EDITS))
        real_node.apply_objects(_git_objects(git_ns, runner_image, password, cert, tls_key))
        proxy = rp.deploy_auth_proxy(
            real_node, config, admin_key=rp.new_admin_key(), upstream=f"http://fake-model.{model_ns}", ca_bundle=ca
        )

        async def serving() -> bool:
            logs = [await node_api.read_log(model_ns, "fake-model"), await node_api.read_log(git_ns, "git")]
            return all("serving" in log for log in logs)

        await eventually(serving, limit_s=120, interval_s=0.5, what="the model server and the git host serving")
        rp.enforce_policies(
            real_node,
            [
                *rp.network_policies(config),
                _upstream_opening(proxy.namespace, model_ns),
                _upstream_opening(proxy.namespace, git_ns, GIT_PORT, "git"),
            ],
        )

        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(config.namespace).auth_proxy(proxy.url)
        provider = provider.timeout(300).git_credentials(GitHosts({host: GitCredential(password, USER)}))
        if runtime == "gvisor":  # the step's pod and the push pod
            provider = provider.runtime_class("gvisor")
        workspace = Workspace(f"https://{host}/org/repo.git", ref="main", push_branch=BRANCH)
        step = AgentConfig("Fix add().", allowed_tools=("Bash",), workspace=workspace).account_lease(
            AccountLease("acct-1", "ANTHROPIC_API_KEY", key)
        )
        created: list[dict[str, Any]] = []
        original = node_api.create

        async def recording(resource: k8s.Resource, namespace: str | None, body: Any) -> Any:
            if resource == k8s.PODS:
                created.append(body)
            return await original(resource, namespace, body)

        node_api.create = recording  # type: ignore[method-assign]
        scoped = step.scoped(f"run-{suffix}", "fix")
        try:
            result, took = await rp.run_step(real_node, proxy, provider.settings, node_api, scoped)
        except Exception:  # what each side saw, for the failure's report (names and paths only)
            proxy_pod = await rp.proxy_pod(node_api, proxy.namespace)
            print("git host:", await node_api.read_log(git_ns, "git"))
            print("proxy:", (await node_api.read_log(proxy.namespace, proxy_pod))[-4000:])
            raise

        assert result.text == "Probed."  # the model server's scripted last turn
        assert result.workspace is not None
        assert {f.path: f.change for f in result.workspace.files} == {
            "added.txt": Change.ADDED,
            "calc.py": Change.MODIFIED,
            "notes.txt": Change.DELETED,
        }
        assert b"+fixed" in result.workspace.patch
        assert result.workspace.pushed_branch == BRANCH
        assert await _git(node_api, git_ns, "show", f"{BRANCH}:calc.py") == "def add(a, b):\n    return a - b\nfixed\n"
        assert await _git(node_api, git_ns, "show", f"{BRANCH}:added.txt") == "new\n"
        tree = await _git(node_api, git_ns, "ls-tree", "--name-only", BRANCH)
        assert tree.split() == ["added.txt", "calc.py"]
        parent = await _git(node_api, git_ns, "rev-parse", f"{BRANCH}^")
        assert parent == await _git(node_api, git_ns, "rev-parse", "main")  # one commit on the clone's base
        assert (await _git(node_api, git_ns, "log", "-1", "--format=%an", BRANCH)).strip() == "ironflow"

        requests = [json.loads(line) for line in (await node_api.read_log(git_ns, "git")).splitlines()
                    if line.startswith("{")]  # fmt: skip
        assert requests, "the git host saw no request"
        assert {r["user"] for r in requests} == {USER}, requests  # every request carried the proxy's credential
        assert any(r["path"].endswith("/git-upload-pack") and r["status"] == 200 for r in requests), requests
        assert any(r["path"].endswith("/git-receive-pack") and r["status"] == 200 for r in requests), requests
        assert len(created) == 2, [p["metadata"]["name"] for p in created]  # the step's pod, the push's pod
        assert find_leaks([password.reveal()], json.dumps(created)) == []
        assert {p["spec"].get("runtimeClassName", "runc") for p in created} == {runtime}
        print(f"{runtime}: workspace step with clone, report and push: {took:.1f}s")

        async def nothing_left() -> bool:
            return not (await node_api.list(k8s.PODS, config.namespace)).items

        await eventually(nothing_left, limit_s=60, interval_s=0.5, what="the step's pods deleted")


@dataclass(frozen=True)
class _GitBehindProxy:
    """A git host pod and the auth proxy, under the rendered NetworkPolicies plus the opening to the host."""

    config: setup.ClusterSetup
    proxy: rp.ProxyInCluster
    git_ns: str
    host: str
    password: Secret


@contextlib.asynccontextmanager
async def _git_behind_proxy(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, runner_image: str, tmp_path: Path
) -> AsyncIterator[_GitBehindProxy]:
    """What ``exec`` on a git workspace needs: the git host serving, the proxy trusting its CA, the
    policies enforced; every namespace gone after."""
    suffix = uuid.uuid4().hex[:6]
    config = rp.cluster_setup(agents=f"ag-{suffix}", worker=f"wk-{suffix}", proxy=f"px-{suffix}")
    git_ns = f"gt-{suffix}"
    host = f"git.{git_ns}.svc.cluster.local"
    password = Secret("ghs_" + uuid.uuid4().hex)
    ca, cert, tls_key = _tls(tmp_path, host)
    with rp.cluster_namespaces(real_node, config, git_ns):
        real_node.apply_objects(_git_objects(git_ns, runner_image, password, cert, tls_key))
        proxy = rp.deploy_auth_proxy(real_node, config, admin_key=rp.new_admin_key(), ca_bundle=ca)

        async def serving() -> bool:
            return "serving" in await node_api.read_log(git_ns, "git")

        await eventually(serving, limit_s=120, interval_s=0.5, what="the git host serving")
        rp.enforce_policies(
            real_node, [*rp.network_policies(config), _upstream_opening(proxy.namespace, git_ns, GIT_PORT, "git")]
        )
        yield _GitBehindProxy(config, proxy, git_ns, host, password)

        async def nothing_left() -> bool:
            return not (await node_api.list(k8s.PODS, config.namespace)).items

        await eventually(nothing_left, limit_s=60, interval_s=0.5, what="the exec pod deleted")


async def _cloned_through_the_relay(node_api: k8s.KubeApi, git: _GitBehindProxy) -> None:
    requests = [json.loads(line) for line in (await node_api.read_log(git.git_ns, "git")).splitlines()
                if line.startswith("{")]  # fmt: skip
    assert any(r["path"].endswith("/git-upload-pack") and r["status"] == 200 for r in requests), requests
    assert {r["user"] for r in requests} == {USER}, requests  # every request carried the proxy's credential


@pytest.mark.parametrize("runtime", ["runc", "gvisor"])
async def test_exec_on_a_git_workspace_clones_through_the_proxy_under_the_rendered_policies(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path, runtime: str
) -> None:
    """``exec --backend k8s --workspace URL`` by its own path (``exec_pod_run``, then
    ``command_pods.run_in_workspace``, as the CLI calls them; the grant issued through the proxy's
    admin API forwarded from the host, since the CLI's host cannot reach the in-cluster Service).
    Fails while the exec pod is a ``pod-run``: the policies give it no DNS and the proxy admits
    it not, so the clone never connects."""
    runner_image = need_image["runner"]
    need_image["auth-proxy"]
    async with _git_behind_proxy(real_node, node_api, runner_image, tmp_path) as git:
        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(git.config.namespace)
        provider = provider.auth_proxy(git.proxy.url).git_credentials(
            GitHosts({git.host: GitCredential(git.password, USER)})
        )
        if runtime == "gvisor":
            provider = provider.runtime_class("gvisor")
        settings = provider.settings
        spec = Workspace(f"https://{git.host}/org/repo.git", ref="main")
        argv = ["sh", "-c", "id -u; cat calc.py; " + EDITS]
        run = pod_runs.exec_pod_run(
            settings, argv, timeout_s=240, now_ms=time.time_ns() // 1_000_000, rand32=secrets.randbits(32)
        )
        with rp.forward_into_node(real_node, git.proxy.cluster_ip, 80) as admin_url:
            async with AdminClient(admin_url, git.proxy.admin_key) as admin:
                done, changes = await command_pods.run_in_workspace(
                    node_api, settings, run, spec, now=int(time.time()), issuer=admin
                )
        if not done.success:
            print("git host:", await node_api.read_log(git.git_ns, "git"))
        assert (done.success, done.exit_code) == (True, 0), done
        assert done.logs == "10001\ndef add(a, b):\n    return a - b\n", done.logs
        assert changes is not None
        assert {f.path: f.change for f in changes.files} == {
            "added.txt": Change.ADDED,
            "calc.py": Change.MODIFIED,
            "notes.txt": Change.DELETED,
        }
        await _cloned_through_the_relay(node_api, git)


async def test_a_session_on_a_git_workspace_runs_over_http_and_returns_its_change_set(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    """A k8s session opened on a git workspace: cloned in its pod through the proxy's relay (the
    grant issued by the proxy's admin API, as a worker's is), its command sent over HTTP to the
    runtime the pod runs (``transport="http"``: no exec fallback), from inside the node's network as
    a worker pod's; ``changes()`` is the exact change set, and the session's pod goes at close."""
    runner_image = need_image["runner"]
    need_image["auth-proxy"]
    async with _git_behind_proxy(real_node, node_api, runner_image, tmp_path) as git:
        provider = K8sEphemeralProvider.sandboxed(runner_image).namespace(git.config.namespace)
        settings = (
            provider.auth_proxy(git.proxy.url)
            .git_credentials(GitHosts({git.host: GitCredential(git.password, USER)}))
            .settings
        )
        spec = Workspace(f"https://{git.host}/org/repo.git", ref="main")
        with inside_node_network(real_node):
            async with (
                AdminClient(f"http://{git.proxy.cluster_ip}", git.proxy.admin_key) as admin,
                K8sSessions(settings, api=node_api, issuer=admin, transport="http") as sessions,
            ):
                sandbox = await sessions.open(OpenOptions(ttl=300, workspace=spec))
                assert sessions.route(sandbox.id)[0].startswith("http://")  # the runtime, not the exec bridge
                ran = await sandbox.commands.run(["sh", "-c", "id -u; cat calc.py; " + EDITS])
                changes = await sessions.changes(sandbox.id)
                await sandbox.close()
        if ran.exit_code != 0:
            print("git host:", await node_api.read_log(git.git_ns, "git"))
        assert (ran.exit_code, ran.stdout) == (0, "10001\ndef add(a, b):\n    return a - b\n"), ran
        assert {f.path: f.change for f in changes.files} == {
            "added.txt": Change.ADDED,
            "calc.py": Change.MODIFIED,
            "notes.txt": Change.DELETED,
        }
        await _cloned_through_the_relay(node_api, git)


def _cli_exec(
    real_node: RealNodeEnv, provider_file: Path, password: Secret, admin_key: Secret, url: str, *argv: str
) -> subprocess.CompletedProcess[str]:
    """``ironflow exec --backend k8s --workspace URL -o json`` as a user runs it: a child process
    with the provider file, ``$KUBECONFIG``, the host's token and the proxy's admin key in its
    environment. It runs inside the node's network namespace, where the auth proxy's ClusterIP
    answers as it would on a cluster's network (and the API server's port is the same)."""
    env = {
        **os.environ,
        "KUBECONFIG": str(real_node.kubeconfig_path),
        "PYTHONPATH": str(ROOT / "src"),
        "IRONFLOW_GIT_TOKEN": password.reveal(),
        "IRONFLOW_GIT_USERNAME": USER,
        "IRONFLOW_AUTH_PROXY_ADMIN_KEY": admin_key.reveal(),
    }
    args = ["exec", "--backend", "k8s", "--provider", str(provider_file), "--timeout", "240"]
    args += ["--workspace", url, "--output", "json", "--", *argv]
    return subprocess.run(
        [*real_node.nsenter(), sys.executable, "-m", "ironflow", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def test_the_exec_cli_runs_a_command_on_a_git_clone_and_prints_the_exact_change_set(
    real_node: RealNodeEnv, node_api: k8s.KubeApi, need_image: dict[str, str], tmp_path: Path
) -> None:
    """``python -m ironflow exec --backend k8s --workspace URL`` as a child process (not the CLI's
    code called in-process): its provider file names the image, namespace and auth proxy; the grant
    comes from the proxy's admin API by the CLI's own client; the command sees the clone and the
    JSON it prints holds the exact change set; the token never reaches the output."""
    runner_image = need_image["runner"]
    need_image["auth-proxy"]
    async with _git_behind_proxy(real_node, node_api, runner_image, tmp_path) as git:
        provider_file = tmp_path / "provider.yaml"
        provider_file.write_text(
            f"image: {runner_image}\nsandboxed: true\nnamespace: {git.config.namespace}\n"
            f"auth_proxy: http://{git.proxy.cluster_ip}\n"
        )
        argv = ["sh", "-c", "id -u; cat calc.py; " + EDITS]
        url = f"https://{git.host}/org/repo.git"
        done = await asyncio.to_thread(
            _cli_exec, real_node, provider_file, git.password, git.proxy.admin_key, url, *argv
        )
        if done.returncode != 0:
            print("git host:", await node_api.read_log(git.git_ns, "git"))
        assert done.returncode == 0, done.stderr[-4000:]
        out = json.loads(done.stdout)
        assert (out["exit_code"], out["stdout"]) == (0, "10001\ndef add(a, b):\n    return a - b\n")
        assert sorted((f["path"], f["change"]) for f in out["changed_files"]) == [
            ("added.txt", Change.ADDED.value),
            ("calc.py", Change.MODIFIED.value),
            ("notes.txt", Change.DELETED.value),
        ]
        assert "+fixed" in out["patch"]
        assert "+new" in out["patch"]
        assert "-old notes" in out["patch"]
        assert find_leaks([git.password.reveal(), git.proxy.admin_key.reveal()], done.stdout + done.stderr) == []
        await _cloned_through_the_relay(node_api, git)
