"""The test server's fake kubelet and Job controller, driven by the test.

Pods move Pending -> Running -> Succeeded/Failed when the test says so (``set_pod_phase``) or as
a :class:`PodScript` says; ``activeDeadlineSeconds`` fails a running pod with
``DeadlineExceeded``; a deleted running pod is stopped after its grace period (bounded by
``pod_termination_s``). Container logs are kept here and wake their followers. Jobs get pods
from their template and a status that follows them, when the test runs them.

Every transition is a loop timer, never a task, so stopping the server cancels them all.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ironflow.testing import _kube_store as store_mod

__all__ = ["TERMINAL", "Kubelet", "PodScript", "job_finished"]

TERMINAL: Final = frozenset({"Succeeded", "Failed"})
_DEADLINE_MESSAGE: Final = "Pod was active on the node longer than the specified deadline"

Obj = store_mod.Obj


@dataclass(frozen=True)
class PodScript:
    """What the fake kubelet does with new pods matching ``name_prefix`` and ``labels``:
    Pending for ``start_after`` s, Running with ``log`` for ``run_for`` s (``None``: until
    deleted or past its deadline), then ``phase``. ``terminates=False`` keeps a deleted pod
    in Terminating for ever (a node that never answers)."""

    name_prefix: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    start_after: float = 0.0
    run_for: float | None = 0.0
    phase: str = "Succeeded"
    exit_code: int | None = None
    log: str = ""
    reason: str | None = None
    terminates: bool = True

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        labels = meta.get("labels") or {}
        return str(meta.get("name", "")).startswith(self.name_prefix) and all(
            labels.get(k) == v for k, v in self.labels.items()
        )


class Kubelet:
    """Pod phases, logs, deadlines and Job pods for one :class:`~ironflow.testing._kube_store.Store`."""

    def __init__(self, store: store_mod.Store, *, pod_termination_s: float) -> None:
        self.store = store
        self.pod_termination_s = pod_termination_s
        self._pod_scripts: list[PodScript] = []
        self._job_scripts: list[PodScript] = []
        self._assigned: dict[str, PodScript] = {}  # pod uid -> its script
        self.logs: dict[tuple[str, str, str], str] = {}
        self._signals: dict[tuple[str, str], asyncio.Event] = {}
        self._timers: dict[str, list[asyncio.TimerHandle]] = {}  # uid -> pending transitions
        self._terminating: dict[str, asyncio.TimerHandle | None] = {}  # pod uid -> kubelet stopping it
        store.lifecycle = self

    def stop(self) -> None:
        """Cancel every pending transition and wake every log follower."""
        for signal in self._signals.values():
            signal.set()
        for handles in self._timers.values():
            for handle in handles:
                handle.cancel()
        self._timers.clear()
        for pending in self._terminating.values():
            if pending is not None:
                pending.cancel()
        self._terminating.clear()

    # --- the store's lifecycle hooks ------------------------------------------------------

    def holds(self, uid: str) -> bool:
        return uid in self._terminating

    def removed(self, t: store_mod.Type, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        self._cancel_timers(uid)
        if (pending := self._terminating.pop(uid, None)) is not None:
            pending.cancel()
        self._assigned.pop(uid, None)
        if t.key == ("", "pods"):
            key = (meta.get("namespace") or "", meta["name"])
            for log_key in [k for k in self.logs if k[:2] == key]:
                del self.logs[log_key]
            self._signal(key[0], key[1])
            self._signals.pop(key, None)

    # --- new objects ----------------------------------------------------------------------

    def pod_created(self, pod: Obj) -> None:
        """Apply the newest matching pod script, if any."""
        self._apply_pod_script(pod)

    def job_created(self, job: Obj) -> None:
        """Arm the Job's deadline and, when a job script matches, start its pod."""
        self._arm_job_deadline(job)
        for script in self._job_scripts:
            if script.matches(job):
                self._start_job_pod(job, script)
                break

    def wait_signal(self, namespace: str, pod: str) -> asyncio.Event:
        """An event set at the pod's next log or phase change."""
        return self._signals.setdefault((namespace, pod), asyncio.Event())

    # --- test controls --------------------------------------------------------------------

    def script_pods(self, script: PodScript | None = None, /, **kwargs: Any) -> PodScript:
        """Run every new pod that matches ``script`` (or ``PodScript(**kwargs)``); newest script wins."""
        chosen = script if script is not None else PodScript(**kwargs)
        self._pod_scripts.insert(0, chosen)
        return chosen

    def script_jobs(self, script: PodScript | None = None, /, **kwargs: Any) -> PodScript:
        """Act as the Job controller for new Jobs matching the script: create one pod from the
        template and run it with the script; the Job's status follows its pod."""
        chosen = script if script is not None else PodScript(**kwargs)
        self._job_scripts.insert(0, chosen)
        return chosen

    def unscript(self, script: PodScript) -> None:
        """Stop applying a pod or job script to new objects."""
        for scripts in (self._pod_scripts, self._job_scripts):
            if script in scripts:
                scripts.remove(script)

    def set_log(self, namespace: str, pod: str, text: str, *, container: str | None = None) -> None:
        """Replace a container's log (the pod's only or first container by default)."""
        self.logs[(namespace, pod, container or self.default_container(namespace, pod))] = text
        self._signal(namespace, pod)

    def append_log(self, namespace: str, pod: str, text: str, *, container: str | None = None) -> None:
        """Append to a container's log; followers receive it at once."""
        key = (namespace, pod, container or self.default_container(namespace, pod))
        self.logs[key] = self.logs.get(key, "") + text
        self._signal(namespace, pod)

    def set_pod_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        exit_code: int | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> Obj:
        """Move a pod to ``Pending``, ``Running``, ``Succeeded`` or ``Failed`` as a kubelet would report it."""
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError(f"unknown pod phase {phase!r}: use Pending, Running, Succeeded, Failed or Unknown")
        t = self.store.kinds[("", "pods")]
        pod = self.store.objects[t.key].get((namespace, name))
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        new = copy.deepcopy(pod)
        status = new.setdefault("status", {})
        status["phase"] = phase
        for key, value in (("reason", reason), ("message", message)):
            if value is not None:
                status[key] = value
        containers = [c.get("name", "") for c in new.get("spec", {}).get("containers", [])]
        if phase in ("Running", *TERMINAL):  # as a kubelet without probes: Ready while it runs
            status.setdefault("podIP", "10.0.0.2")
            status["conditions"] = [
                {"type": t, "status": "True" if phase == "Running" else "False", "lastTransitionTime": store_mod.now()}
                for t in ("Ready", "ContainersReady")
            ]
        if phase == "Running":
            new["spec"].setdefault("nodeName", "kube-test-node")
            status.setdefault("startTime", store_mod.now())
            status["containerStatuses"] = [
                {
                    "name": c,
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": "",
                    "imageID": "",
                    "state": {"running": {"startedAt": store_mod.now()}},
                }
                for c in containers
            ]
        elif phase in TERMINAL:
            new["spec"].setdefault("nodeName", "kube-test-node")
            code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
            status["containerStatuses"] = [
                {
                    "name": c,
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "image": "",
                    "imageID": "",
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Completed" if code == 0 else "Error",
                            "finishedAt": store_mod.now(),
                        }
                    },
                }
                for c in containers
            ]
        stored = self.store.replace(t, new)
        if phase == "Running":
            self._arm_deadline(stored)
        if phase in TERMINAL:
            self._cancel_timers(stored["metadata"]["uid"])
            self._signal(namespace, name)
            self._job_pod_finished(stored)
        return copy.deepcopy(stored)

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        """Replace a pod's status with one a kubelet or the scheduler wrote (a waiting container, a
        ``PodScheduled=False`` condition, an eviction); a scheduled one binds the pod to the node."""
        t = self.store.kinds[("", "pods")]
        pod = self.store.objects[t.key].get((namespace, name))
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        new = copy.deepcopy(pod)
        new["status"] = copy.deepcopy(dict(status))
        if status.get("hostIP"):
            new["spec"].setdefault("nodeName", "kube-test-node")
        stored = self.store.replace(t, new)
        if status.get("phase") in TERMINAL:
            self._cancel_timers(stored["metadata"]["uid"])
            self._signal(namespace, name)
        return copy.deepcopy(stored)

    def record_event(self, namespace: str, name: str, kind: str, reason: str, message: str) -> None:
        """Record an event about pod ``name``, as its kubelet would (``kind`` Normal or Warning)."""
        pod = self.store.objects[("", "pods")].get((namespace, name))
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        self._record_event(pod, reason, message, kind)

    def run_job(
        self,
        namespace: str,
        job: str,
        script: PodScript | None = None,
        /,
        **kwargs: Any,
    ) -> Obj:
        """Act as the Job controller once: create a pod for Job ``job`` from its template and run
        it with ``script`` (or ``PodScript(**kwargs)``). Returns the pod."""
        t = self.store.kinds[("batch", "jobs")]
        stored = self.store.objects[t.key].get((namespace, job))
        if stored is None:
            raise KeyError(f"no job {namespace}/{job}")
        return self._start_job_pod(stored, script if script is not None else PodScript(**kwargs))

    # --- transitions ---------------------------------------------------------------------

    def _timer(self, uid: str, delay: float, callback: Any, *args: Any) -> None:
        handle = asyncio.get_running_loop().call_later(max(0.0, delay), callback, *args)
        self._timers.setdefault(uid, []).append(handle)

    def _cancel_timers(self, uid: str) -> None:
        for handle in self._timers.pop(uid, []):
            handle.cancel()

    def _signal(self, namespace: str, pod: str) -> None:
        event = self._signals.pop((namespace, pod), None)
        if event is not None:
            event.set()

    def default_container(self, namespace: str, pod: str) -> str:
        obj = self.store.objects[("", "pods")].get((namespace, pod))
        containers = (obj or {}).get("spec", {}).get("containers") or [{}]
        return str(containers[0].get("name", ""))

    def graceful_delete(self, t: store_mod.Type, obj: Obj, period: int) -> None:
        """Stop a deleted running pod: after ``min(period, pod_termination_s)`` it is removed."""
        uid = obj["metadata"]["uid"]
        script = self._assigned.get(uid)
        if script is not None and not script.terminates:
            self._terminating[uid] = None  # a node that never confirms the kill
            return
        delay = min(float(period), self.pod_termination_s)
        ns, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        self._terminating[uid] = asyncio.get_running_loop().call_later(delay, self._terminated, t, ns, name, uid)

    def _terminated(self, t: store_mod.Type, namespace: str, name: str, uid: str) -> None:
        self._terminating.pop(uid, None)
        obj = self.store.objects[t.key].get((namespace, name))
        if obj is not None and obj["metadata"]["uid"] == uid and not obj["metadata"].get("finalizers"):
            self.store.remove(t, obj)

    def _apply_pod_script(self, pod: Obj) -> None:
        for script in self._pod_scripts:
            if script.matches(pod):
                self._run_script(pod, script)
                return

    def _run_script(self, pod: Obj, script: PodScript) -> None:
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta.get("namespace", ""), meta["name"]
        self._assigned[uid] = script

        def start() -> None:
            if not self._alive(ns, name, uid):
                return
            if script.log:
                self.set_log(ns, name, script.log)
            self.set_pod_phase(ns, name, "Running")
            if script.run_for is not None:
                self._timer(uid, script.run_for, finish)

        def finish() -> None:
            if self._alive(ns, name, uid):
                self.set_pod_phase(ns, name, script.phase, exit_code=script.exit_code, reason=script.reason)

        self._timer(uid, script.start_after, start)

    def _alive(self, namespace: str, name: str, uid: str) -> bool:
        obj = self.store.objects[("", "pods")].get((namespace, name))
        return obj is not None and obj["metadata"]["uid"] == uid and not obj["metadata"].get("deletionTimestamp")

    def _arm_deadline(self, pod: Obj) -> None:
        seconds = pod.get("spec", {}).get("activeDeadlineSeconds")
        if seconds is None:
            return
        meta = pod["metadata"]
        uid, ns, name = meta["uid"], meta.get("namespace", ""), meta["name"]

        def expire() -> None:
            current = self.store.objects[("", "pods")].get((ns, name))
            if current is None or current["metadata"]["uid"] != uid:
                return
            if current.get("status", {}).get("phase") in TERMINAL:
                return
            self.set_pod_phase(ns, name, "Failed", exit_code=137, reason="DeadlineExceeded", message=_DEADLINE_MESSAGE)
            self._record_event(current, "DeadlineExceeded", _DEADLINE_MESSAGE)

        self._timer(uid, float(seconds), expire)

    def _record_event(self, about: Obj, reason: str, message: str, kind: str = "Warning") -> None:
        meta = about["metadata"]
        t = self.store.kinds[("", "events")]
        self.store.insert(
            t,
            meta.get("namespace"),
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": meta["name"] + "."},
                "involvedObject": {
                    "kind": about.get("kind", ""),
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "namespace": meta.get("namespace", ""),
                },
                "reason": reason,
                "message": message,
                "type": kind,
                "count": 1,
                "source": {"component": "kube-test-server"},
            },
        )

    def _start_job_pod(self, job: Obj, script: PodScript) -> Obj:
        meta = job["metadata"]
        template = copy.deepcopy(job.get("spec", {}).get("template", {}))
        pod_meta = template.get("metadata", {})
        pod_meta["generateName"] = meta["name"] + "-"
        pod_meta.pop("name", None)
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template.get("spec", {})}
        pod = self.store.insert(self.store.kinds[("", "pods")], meta.get("namespace"), body)
        self._job_update(
            job,
            lambda status: status.update(
                active=int(status.get("active", 0)) + 1, startTime=status.get("startTime", store_mod.now())
            ),
        )
        self._run_script(pod, script)
        return copy.deepcopy(pod)

    def _job_update(self, job: Obj, change: Any) -> Obj | None:
        t = self.store.kinds[("batch", "jobs")]
        meta = job["metadata"]
        current = self.store.objects[t.key].get((meta.get("namespace", ""), meta["name"]))
        if current is None or current["metadata"]["uid"] != meta["uid"]:
            return None
        new = copy.deepcopy(current)
        change(new.setdefault("status", {}))
        return self.store.replace(t, new)

    def _job_pod_finished(self, pod: Obj) -> None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("kind") != "Job":
                continue
            job = self.store.objects[("batch", "jobs")].get((pod["metadata"].get("namespace", ""), ref.get("name", "")))
            if job is None or job["metadata"]["uid"] != ref.get("uid"):
                continue
            succeeded = pod["status"]["phase"] == "Succeeded"
            backoff = int(job["spec"].get("backoffLimit", 6))

            def change(status: Obj, ok: bool = succeeded, limit: int = backoff) -> None:
                status["active"] = max(0, int(status.get("active", 0)) - 1)
                if ok:
                    status["succeeded"] = int(status.get("succeeded", 0)) + 1
                    status["completionTime"] = store_mod.now()
                    status["conditions"] = [
                        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": store_mod.now()},
                        {"type": "Complete", "status": "True", "lastTransitionTime": store_mod.now()},
                    ]
                else:
                    status["failed"] = int(status.get("failed", 0)) + 1
                    if status["failed"] > limit:
                        status["conditions"] = [
                            {
                                "type": "FailureTarget",
                                "status": "True",
                                "reason": "BackoffLimitExceeded",
                                "lastTransitionTime": store_mod.now(),
                            },
                            {
                                "type": "Failed",
                                "status": "True",
                                "reason": "BackoffLimitExceeded",
                                "message": "Job has reached the specified backoff limit",
                                "lastTransitionTime": store_mod.now(),
                            },
                        ]

            if not job_finished(job):
                self._job_update(job, change)

    def _arm_job_deadline(self, job: Obj) -> None:
        seconds = job.get("spec", {}).get("activeDeadlineSeconds")
        if seconds is None:
            return
        meta = job["metadata"]

        def expire() -> None:
            current = self.store.objects[("batch", "jobs")].get((meta.get("namespace", ""), meta["name"]))
            if current is None or current["metadata"]["uid"] != meta["uid"] or job_finished(current):
                return
            message = "Job was active longer than specified deadline"

            def change(status: Obj) -> None:
                status["active"] = 0
                status["conditions"] = [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": message,
                        "lastTransitionTime": store_mod.now(),
                    },
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "DeadlineExceeded",
                        "message": message,
                        "lastTransitionTime": store_mod.now(),
                    },
                ]

            self._job_update(current, change)
            for dep_t, dep in self.store.dependents(meta["uid"]):
                if dep_t.key == ("", "pods"):
                    self.store.delete(dep_t, dep, grace=None, policy="Background")

        self._timer(meta["uid"], float(seconds), expire)


def job_finished(job: Mapping[str, Any]) -> bool:
    """Whether a Job has a true Complete or Failed condition."""
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )
