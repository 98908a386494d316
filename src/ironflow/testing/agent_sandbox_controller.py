"""A scripted stand-in for the agent-sandbox controllers, for tests against the Kubernetes test server.

It does, through the API like the real controllers, the part of their work ironflow depends on
(see the reference's section 2): a SandboxWarmPool keeps ``replicas`` member Sandboxes
(``<pool>-<5 chars>``, labelled ``agents.x-k8s.io/warm-pool-sandbox=<FNV-1a(pool)>``, owned by
the pool), each with a pod named after it; a SandboxClaim without env adopts the oldest Ready
member (labels and ownerReference moved to the claim, ``launch-type=warm``) and the pool
replenishes (scaled down, it deletes idle members, unready first, then newest); otherwise it
cold-starts a Sandbox named after the claim. Sandbox ``Ready`` follows its pod; the claim
mirrors it with ``status.sandbox.name``. Deleting a claim cascades (ownerReferences) to its
Sandbox and pod through the server's garbage collector.

The test scripts the timing: ``cold_start_s``, ``warm_start_s``, and ``stall(claim)`` to keep
a claim's pod Pending for ever. It reconciles by listing every ``interval_s`` (a stand-in
needs no watch); it never touches objects outside its namespace. Compared against the real
controller (v1.0.3, ``tests/agent_sandbox/integration/test_realkube_agent_sandbox_provider.py``): conditions,
reasons and messages as it writes them; no ``pod-name`` annotation on adoption; claim expiry
(``lifecycle.shutdownTime`` with policy Delete) only with ``expire_claims=True``. What it does
and this does not (TTL, suspend, NetworkPolicies, Services, PVCs) is out of scope here.
"""

from __future__ import annotations

import asyncio
import calendar
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final

import aiohttp

from ironflow import errors
from ironflow import labels as k8s_labels
from ironflow.agent_sandbox import models, sandbox_environments, schemas
from ironflow.kube import api
from ironflow.testing.kube import KubeTestServer

__all__ = ["AgentSandboxController", "name_hash"]

Obj = dict[str, Any]
_P: Final = k8s_labels.AGENT_SANDBOX_KEY_PREFIX
LABEL_WARM_POOL: Final = k8s_labels.LABEL_WARM_POOL_SANDBOX
LABEL_NAME_HASH: Final = k8s_labels.LABEL_SANDBOX_NAME_HASH
LABEL_TEMPLATE_REF_HASH: Final = _P + "sandbox-template-ref-hash"
LABEL_LAUNCH_TYPE: Final = _P + "launch-type"
LABEL_CLAIM_UID: Final = _P + "claim-uid"
ANNOTATION_POD_NAME: Final = k8s_labels.ANNOTATION_SANDBOX_POD_NAME
ANNOTATION_SANDBOX_NAME: Final = _P + "sandbox-name"
_ip = itertools.count(2)


#: ``NameHash``: 32-bit FNV-1a, 8 lowercase hex digits (the one ironflow's environments label PVCs with).
name_hash = sandbox_environments.name_hash


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or ():
        if cond.get("type") == kind:
            return dict(cond)
    return None


def _ready(obj: Mapping[str, Any]) -> bool:
    cond = _condition(obj, "Ready")
    return cond is not None and cond.get("status") == "True"


def _owner(obj: Mapping[str, Any], controller: bool = True) -> Obj:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _owned_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    return any(r.get("uid") == owner_uid for r in obj["metadata"].get("ownerReferences") or ())


def _expired(claim: Mapping[str, Any]) -> bool:
    """``lifecycle.shutdownTime`` has passed and the policy deletes the claim."""
    lifecycle = claim.get("spec", {}).get("lifecycle") or {}
    when = lifecycle.get("shutdownTime")
    if not when or lifecycle.get("shutdownPolicy", "Retain") != "Delete":
        return False
    return calendar.timegm(time.strptime(when, "%Y-%m-%dT%H:%M:%SZ")) <= time.time()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _cond(kind: str, status: bool, reason: str, message: str = "") -> Obj:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": _now(),
    }


class AgentSandboxController:
    """``async with AgentSandboxController(server, namespace="ns"):`` runs the stand-in.

    Registers the CRDs of ``release`` on the server (by default the shipped release of
    ``version``: v1.0.3 serves v1beta1, v0.4.6 v1alpha1).
    ``version`` is the API version the stand-in reads and writes.
    """

    def __init__(
        self,
        server: KubeTestServer,
        *,
        namespace: str = "default",
        version: models.ApiVersion = models.ApiVersion.V1BETA1,
        release: str | None = None,
        cold_start_s: float = 0.05,
        warm_start_s: float = 0.0,
        interval_s: float = 0.02,
        stall: Callable[[Mapping[str, Any]], bool] | None = None,
        expire_claims: bool = False,
    ) -> None:
        self.server = server
        self.namespace = namespace
        self.version = version
        self.release = release or schemas.DEFAULT_RELEASE[str(version)]
        self.cold_start_s = cold_start_s
        self.warm_start_s = warm_start_s
        self.interval_s = interval_s
        self.stall = stall
        #: Delete a claim once its ``lifecycle.shutdownTime`` passes (shutdownPolicy Delete), as the
        #: real controller (v1.0.3) does; off by default, so reaper tests can play a controller that is down.
        self.expire_claims = expire_claims
        #: What happened, in order: ("cold", claim, sandbox), ("warm", claim, sandbox), ("member", pool, sandbox),
        #: ("scaled-down", pool, sandbox), ("expired", claim, "").
        self.events: list[tuple[str, str, str]] = []
        self._ready_at: dict[str, float] = {}  # sandbox uid -> when its pod runs
        self._adopted: set[str] = set()  # sandbox names already given to a claim
        self._task: asyncio.Task[None] | None = None
        self._api: api.KubeApi | None = None
        self._http: aiohttp.ClientSession | None = None
        self.failures: list[BaseException] = []
        core, ext = models.CORE_GROUP, models.EXTENSIONS_GROUP
        v = str(version)
        self.sandboxes = api.custom_resource(core, v, "sandboxes", kind="Sandbox")
        self.templates = api.custom_resource(ext, v, "sandboxtemplates", kind="SandboxTemplate")
        self.claims = api.custom_resource(ext, v, "sandboxclaims", kind="SandboxClaim")
        self.pools = api.custom_resource(ext, v, "sandboxwarmpools", kind="SandboxWarmPool")

    # -- lifecycle --

    async def start(self) -> AgentSandboxController:
        for crd in schemas.crd_documents(self.release):
            self.server.register_crd(crd)
        self.server.create_namespace(self.namespace)
        self._api = await api.KubeApi.connect(self.server.cluster_config())
        self._http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {self.server.token}"})
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="agent-sandbox-controller")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._http is not None:
            await self._http.close()
        if self._api is not None:
            await self._api.close()

    async def __aenter__(self) -> AgentSandboxController:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- the loop --

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
            except (errors.KubernetesError, aiohttp.ClientError) as exc:
                self.failures.append(exc)  # the next pass retries, as a controller would
            await asyncio.sleep(self.interval_s)

    async def _list(self, resource: api.Resource) -> list[Obj]:
        assert self._api is not None
        return (await self._api.list_all(resource, self.namespace)).items

    async def _get(self, resource: api.Resource, name: str) -> Obj | None:
        assert self._api is not None
        try:
            return await self._api.get(resource, self.namespace, name)
        except errors.KubeNotFound:
            return None

    async def _patch_status(self, resource: api.Resource, name: str, status: Obj) -> None:
        assert self._http is not None
        url = self.server.url + resource.path(self.namespace, name, "status")
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self._http.patch(url, data=json.dumps({"status": status}), headers=headers) as resp:
            if resp.status == 404:
                return  # deleted meanwhile
            if resp.status >= 300:
                raise errors.KubernetesError(f"status patch of {name}: HTTP {resp.status}", status=resp.status)

    async def reconcile(self) -> None:
        """One pass: pools, then sandbox readiness, then claims."""
        assert self._api is not None
        templates = {t["metadata"]["name"]: t for t in await self._list(self.templates)}
        pools = {p["metadata"]["name"]: p for p in await self._list(self.pools)}
        sandboxes = await self._list(self.sandboxes)
        for pool in pools.values():
            await self._keep_pool(pool, templates, sandboxes)
        sandboxes = await self._list(self.sandboxes)
        pods = {p["metadata"]["name"]: p for p in (await self._api.list_all(api.PODS, self.namespace)).items}
        for sandbox in sandboxes:
            await self._sync_sandbox(sandbox, pods.get(sandbox["metadata"]["name"]))
        by_name = {s["metadata"]["name"]: s for s in await self._list(self.sandboxes)}
        for claim in await self._list(self.claims):
            if claim["metadata"].get("deletionTimestamp"):
                continue
            if self.expire_claims and _expired(claim):
                with contextlib.suppress(errors.KubeNotFound):
                    await self._api.delete(self.claims, self.namespace, claim["metadata"]["name"])
                self.events.append(("expired", claim["metadata"]["name"], ""))
                continue
            await self._sync_claim(claim, pools, templates, by_name)

    def _template_of_pool(self, pool: Mapping[str, Any], templates: Mapping[str, Obj]) -> Obj | None:
        return templates.get(pool["spec"]["sandboxTemplateRef"]["name"])

    async def _keep_pool(self, pool: Obj, templates: Mapping[str, Obj], sandboxes: list[Obj]) -> None:
        template = self._template_of_pool(pool, templates)
        if template is None:
            return
        pool_hash = name_hash(pool["metadata"]["name"])
        members = [
            s
            for s in sandboxes
            if (s["metadata"].get("labels") or {}).get(LABEL_WARM_POOL) == pool_hash
            and _owned_by(s, pool["metadata"]["uid"])
        ]
        wanted = pool["spec"].get("replicas", 1)
        await self._scale_down(pool, [m for m in members if m["metadata"]["name"] not in self._adopted], wanted)
        for _ in range(max(0, wanted - len(members))):
            labels = {
                LABEL_WARM_POOL: pool_hash,
                LABEL_TEMPLATE_REF_HASH: name_hash(template["metadata"]["name"]),
                LABEL_LAUNCH_TYPE: "warm",
            }
            sandbox = await self._create_sandbox(
                {"generateName": pool["metadata"]["name"] + "-"}, template, labels, _owner(pool), self.warm_start_s
            )
            self.events.append(("member", pool["metadata"]["name"], sandbox["metadata"]["name"]))

    async def _scale_down(self, pool: Obj, members: list[Obj], wanted: int) -> None:
        """Delete members past ``replicas``, unready first, then newest, as v1.0.3 does: a pool
        scaled to 0 keeps no Ready member a later claim could adopt."""
        assert self._api is not None
        by_age = sorted(members, key=lambda s: (s["metadata"]["creationTimestamp"], s["metadata"]["name"]))
        newest = by_age[::-1]
        order = [s for s in newest if not _ready(s)] + [s for s in newest if _ready(s)]
        for sandbox in order[: max(0, len(members) - wanted)]:
            with contextlib.suppress(errors.KubeNotFound):
                await self._api.delete(self.sandboxes, self.namespace, sandbox["metadata"]["name"])
            self.events.append(("scaled-down", pool["metadata"]["name"], sandbox["metadata"]["name"]))

    async def _create_sandbox(
        self, naming: Obj, template: Mapping[str, Any], labels: Mapping[str, str], owner: Obj, start_s: float
    ) -> Obj:
        assert self._api is not None
        blueprint = template["spec"]
        pod_template = json.loads(json.dumps(blueprint["podTemplate"]))
        pod_template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
        body: Obj = {
            "apiVersion": self.sandboxes.api_version,
            "kind": "Sandbox",
            "metadata": {
                **naming,
                "labels": dict(labels),
                "annotations": {_P + "sandbox-template-ref": template["metadata"]["name"]},
                "ownerReferences": [owner],
            },
            "spec": {"podTemplate": pod_template},
        }
        sandbox = await self._api.create(self.sandboxes, self.namespace, body)
        name = sandbox["metadata"]["name"]
        pod_labels = {k: v for k, v in (pod_template["metadata"].get("labels") or {}).items() if not k.startswith(_P)}
        pod_labels[LABEL_NAME_HASH] = name_hash(name)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": pod_labels,
                "annotations": dict(pod_template["metadata"].get("annotations") or {}),
                "ownerReferences": [_owner(sandbox)],
            },
            "spec": pod_template["spec"],
        }
        await self._api.create(api.PODS, self.namespace, pod)
        self._ready_at[sandbox["metadata"]["uid"]] = time.monotonic() + start_s
        return sandbox

    async def _sync_sandbox(self, sandbox: Obj, pod: Obj | None) -> None:
        uid = sandbox["metadata"]["uid"]
        name = sandbox["metadata"]["name"]
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        phase = (pod.get("status") or {}).get("phase")
        ready_at = self._ready_at.get(uid)
        if phase == "Pending" and ready_at is not None and time.monotonic() >= ready_at:
            self.server.set_pod_phase(self.namespace, name, "Running")
            phase = "Running"
        status: Obj
        if phase == "Running":
            ip = (sandbox.get("status") or {}).get("podIPs") or [f"10.244.0.{next(_ip) % 250 + 2}"]
            status = {"conditions": [_cond("Ready", True, "DependenciesReady")], "podIPs": ip}
        elif phase in ("Succeeded", "Failed"):
            reason = "PodSucceeded" if phase == "Succeeded" else "PodFailed"
            status = {"conditions": [_cond("Ready", False, reason), _cond("Finished", True, reason)]}
        else:
            waiting = f"Pod exists with phase: {phase or 'Pending'}"
            status = {"conditions": [_cond("Ready", False, "DependenciesNotReady", waiting)]}
        if self._changed(sandbox, status):
            await self._patch_status(self.sandboxes, name, status)

    @staticmethod
    def _changed(obj: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        old = obj.get("status") or {}
        kinds = {c["type"]: (c["status"], c["reason"]) for c in old.get("conditions") or ()}
        new = {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or ()}
        extra = {k: v for k, v in status.items() if k != "conditions"}
        return kinds != new or any(old.get(k) != v for k, v in extra.items())

    async def _sync_claim(
        self, claim: Obj, pools: Mapping[str, Obj], templates: Mapping[str, Obj], sandboxes: Mapping[str, Obj]
    ) -> None:
        name = claim["metadata"]["name"]
        bound = ((claim.get("status") or {}).get("sandbox") or {}).get("name")
        if bound:
            sandbox = sandboxes.get(bound)
            if sandbox is None:
                status: Obj = {"conditions": [_cond("Ready", False, "SandboxMissing")]}
            else:
                conditions = [c for c in (sandbox.get("status") or {}).get("conditions") or ()]
                status = {
                    "conditions": conditions or [_cond("Ready", False, "SandboxNotReady")],
                    "sandbox": {"name": bound, "podIPs": (sandbox.get("status") or {}).get("podIPs") or []},
                }
            if self._changed(claim, status):
                await self._patch_status(self.claims, name, status)
            return
        spec = claim["spec"]
        if "warmPoolRef" in spec:
            # Read again when the pass's listing lacks it: it may be newer than the listing.
            pool = pools.get(spec["warmPoolRef"]["name"]) or await self._get(self.pools, spec["warmPoolRef"]["name"])
            if pool is None:
                pool_name = spec["warmPoolRef"]["name"]
                await self._not_ready(claim, "WarmPoolNotFound", f'SandboxWarmPool "{pool_name}" not found')
                return
            template = self._template_of_pool(pool, templates) or await self._get(
                self.templates, pool["spec"]["sandboxTemplateRef"]["name"]
            )
        else:
            policy = spec.get("warmpool", "default")
            template = templates.get(spec["sandboxTemplateRef"]["name"])
            candidates = [
                p
                for p in pools.values()
                if template and p["spec"]["sandboxTemplateRef"]["name"] == template["metadata"]["name"]
            ]
            pool = (
                None
                if policy == "none"
                else next((p for p in candidates if policy == "default" or p["metadata"]["name"] == policy), None)
            )
        if template is None:
            await self._not_ready(claim, "TemplateNotFound")
            return
        member = None
        if pool is not None and not spec.get("env") and not spec.get("volumeClaimTemplates"):
            pool_hash = name_hash(pool["metadata"]["name"])
            ready = [
                s
                for s in sandboxes.values()
                if (s["metadata"].get("labels") or {}).get(LABEL_WARM_POOL) == pool_hash
                and _ready(s)
                and s["metadata"]["name"] not in self._adopted
            ]
            ready.sort(key=lambda s: (s["metadata"]["creationTimestamp"], s["metadata"]["name"]))
            member = ready[0] if ready else None
        if member is not None:
            await self._adopt(claim, member)
            return
        labels = {
            LABEL_LAUNCH_TYPE: "cold",
            LABEL_CLAIM_UID: claim["metadata"]["uid"],
            LABEL_TEMPLATE_REF_HASH: name_hash(template["metadata"]["name"]),
        }
        stalled = self.stall is not None and self.stall(claim)
        if spec.get("env"):
            template = json.loads(json.dumps(template))
            main = template["spec"]["podTemplate"]["spec"]["containers"][0]
            main.setdefault("env", []).extend({"name": e["name"], "value": e["value"]} for e in spec["env"])
        sandbox = await self._create_sandbox(
            {"name": name}, template, labels, _owner(claim), float("inf") if stalled else self.cold_start_s
        )
        self.events.append(("cold", name, sandbox["metadata"]["name"]))
        status = {"conditions": [_cond("Ready", False, "SandboxNotReady")], "sandbox": {"name": name}}
        await self._patch_status(self.claims, name, status)

    async def _not_ready(self, claim: Obj, reason: str, message: str = "") -> None:
        status = {"conditions": [_cond("Ready", False, reason, message)]}
        if self._changed(claim, status):
            await self._patch_status(self.claims, claim["metadata"]["name"], status)

    async def _adopt(self, claim: Obj, member: Obj) -> None:
        assert self._api is not None
        name, sandbox = claim["metadata"]["name"], member["metadata"]["name"]
        self._adopted.add(sandbox)  # never twice, even before the next listing shows the change
        labels: dict[str, Any] = {
            LABEL_WARM_POOL: None,
            LABEL_LAUNCH_TYPE: "warm",
            LABEL_CLAIM_UID: claim["metadata"]["uid"],
        }
        await self._api.patch(
            self.claims, self.namespace, name, {"metadata": {"annotations": {ANNOTATION_SANDBOX_NAME: sandbox}}}
        )
        await self._api.patch(
            self.sandboxes,
            self.namespace,
            sandbox,
            {
                "metadata": {
                    "labels": labels,
                    # v1.0.3 sets no pod-name annotation here: the pod keeps the member's name.
                    "ownerReferences": [_owner(claim)],
                }
            },
        )
        # The Sandbox controller re-syncs its pod's labels: the pool label goes, the claim's uid comes.
        with contextlib.suppress(errors.KubeNotFound):
            await self._api.patch(api.PODS, self.namespace, sandbox, {"metadata": {"labels": labels}})
        self.events.append(("warm", name, sandbox))
        status = {
            "conditions": (member.get("status") or {}).get("conditions") or [],
            "sandbox": {"name": sandbox, "podIPs": (member.get("status") or {}).get("podIPs") or []},
        }
        await self._patch_status(self.claims, name, status)
