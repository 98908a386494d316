"""The seed's two KRO ResourceGraphDefinition architectures around ironflow's hardened pod (pure).

* Concept 07 (:func:`raw_sandbox_rgds`): a Runner RGD owns one raw Sandbox that mounts the PVCs
  it is given; the user-facing RGD owns those PVCs (siblings: they survive the Runner), the
  prompt ConfigMap, and the Runner, or, with a ``schedule``, a CronJob orchestrator (and its
  ServiceAccount, Role, RoleBinding) that creates a Runner, waits for ``Finished``, streams the
  log and deletes it.
* Concept 08 (:func:`template_rgd`): one RGD owns the SandboxTemplate (managed NetworkPolicy),
  its SandboxWarmPool, the prompt ConfigMap, and a SandboxClaim (KRO owns its life: a TTL would
  delete it and KRO would create it again, a new run each time), or a CronJob creating claims
  with a TTL, each waited for and its log streamed.

Every child lives in the instance's namespace (``${schema.metadata.namespace}``), whatever the
namespace given at render time. A graph's default ``schedule`` is ``PatternOptions.schedule``.

Behind an auth proxy (``auth_proxy`` in the provider file), unlike the seed's ``<name>-proxy``
ConfigMap, no graph holds a token or a credential: a proxy token is per run and reaches a pod
only over exec stdin once it runs. The one-shot modes' agent waits for it (the proxy's base URL
is in its shell's env, :func:`~ironflow.agent_sandbox.deliveries.token_wait_prefix`), and
``ironflow sandbox deliver-token`` writes it in: concept 07's Sandbox (the instance's name),
concept 08's claim (``<name>-run``, its adopted Sandbox). Such a graph has no ``schedule``
field and no CronJob: a scheduled run is made by a CronJob, with nobody there to deliver a
token, so a ``schedule`` with ``auth_proxy`` is refused; scheduled pods authenticate with what
the provider reads from a Secret (``env_from_secret``, ``oauth_credentials_from_secret``).

The agent reads its prompt from the mounted prompt ConfigMap (``${schema.spec.prompt}``), so
one graph serves any prompt. A warm-pool pod must not start the agent before a claim adopts it:
it waits while it still carries ``agents.x-k8s.io/warm-pool-sandbox`` (the controller removes
that label from the Sandbox and its pod on adoption; a cold-started pod never has it), read
live through a downward-API volume. The objects are rendered and schema-checked with concrete names first,
then the names become CEL expressions.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import models, patterns, rendering
from ironflow.claude import command
from ironflow.k8s.pod_provider import K8sEphemeralProvider
from ironflow.steps import AgentConfig

__all__ = [
    "KRO_API",
    "PODINFO_DIR",
    "POOL_LABEL",
    "PROMPT_DIR",
    "kro_pod_template",
    "raw_sandbox_rgds",
    "template_rgd",
]

KRO_API: Final = "kro.run/v1alpha1"
#: On a warm-pool member and its pod until a claim adopts it (then removed by the controllers).
POOL_LABEL: Final = labels.LABEL_WARM_POOL_SANDBOX
PROMPT_DIR: Final = "/etc/ironflow/prompt"
PODINFO_DIR: Final = "/etc/ironflow/podinfo"
_PROMPT_PLACEHOLDER: Final = "__IRONFLOW_PROMPT_FROM_CONFIGMAP__"
_PROMPT_CM: Final = "ironflow-kro-prompt"  # rendered name, replaced by the CEL one
_NAME: Final = "${schema.metadata.name}"
_NAMESPACE: Final = "${schema.metadata.namespace}"
#: Five cron fields (each digits, names, ``*``, ``?``, ``/``, ``,``, ``-``) or an ``@`` macro.
_CRON: Final = re.compile(r"(@(yearly|annually|monthly|weekly|daily|midnight|hourly))|([\w*?/,\-]+( [\w*?/,\-]+){4})")
_WAIT_S: Final = 3600


def _cel(expr: str) -> str:
    return "${" + expr + "}"


def kro_pod_template(
    provider: K8sEphemeralProvider, opts: patterns.PatternOptions, *, wait_for_claim: bool
) -> models.PodTemplate:
    """The provider's pod running the agent on the prompt of the mounted prompt ConfigMap.

    ``wait_for_claim`` makes the agent start only once the pod no longer carries :data:`POOL_LABEL`
    (warm-pool members wait idle until a claim adopts them); such a pod has no
    ``activeDeadlineSeconds`` (the kubelet would end it while it idles): its agent gets the
    provider's deadline from adoption on, through ``timeout``. Behind an auth proxy the agent
    then waits for the token ``ironflow sandbox deliver-token`` writes over exec.
    """
    mounted = provider.read_only_config_map(_PROMPT_CM, PROMPT_DIR)
    config = AgentConfig(_PROMPT_PLACEHOLDER, working_dir=patterns.WORKSPACE_PATH)
    template = patterns.agent_pod_template(mounted, config, token_wait=True)  # behind a proxy: deliver-token
    spec = copy.deepcopy(dict(template.spec))
    main = spec["containers"][0]
    shell = main["command"][2].replace(
        command.shell_quote(_PROMPT_PLACEHOLDER), f'"$(cat {command.shell_quote(PROMPT_DIR + "/prompt")})"'
    )
    main["command"] = ["sh", "-c", shell]
    if wait_for_claim:
        labels_file = command.shell_quote(PODINFO_DIR + "/labels")
        wait = f"while grep -q '^{POOL_LABEL}=' {labels_file}; do sleep 1; done; "
        deadline = spec.pop("activeDeadlineSeconds", None)
        # The agent's shell is the wrapper's argument ($1): no second layer of quoting.
        run = f'exec timeout -k 10 {int(deadline)} sh -c "$1"' if deadline is not None else 'exec sh -c "$1"'
        main["command"] = ["sh", "-c", wait + run, "agent", shell]
        spec["volumes"].append(
            {
                "name": "podinfo",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            }
        )
        main["volumeMounts"].append({"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True})
    return models.PodTemplate(spec=spec, labels=template.labels, annotations=template.annotations)


def _templated(obj: dict[str, Any]) -> dict[str, Any]:
    """Point the rendered prompt ConfigMap volume at the graph's ConfigMap."""
    for volume in obj["spec"]["podTemplate"]["spec"]["volumes"]:
        if (volume.get("configMap") or {}).get("name") == _PROMPT_CM:
            volume["configMap"]["name"] = _NAME + "-prompt"
    return obj


def _resource(rid: str, template: Mapping[str, Any], *, when: str | None = None) -> dict[str, Any]:
    """A graph resource; the child goes into the instance's namespace."""
    obj = dict(template)
    obj["metadata"] = {**obj["metadata"], "namespace": _NAMESPACE}
    out: dict[str, Any] = {"id": rid, "template": obj}
    if when is not None:
        out["includeWhen"] = [_cel(when)]
    return out


def _configmap(suffix: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{_NAME}-{suffix}"},
        "data": dict(data),
    }


def _schedule_field(opts: patterns.PatternOptions) -> str:
    """The graph's ``schedule`` field: an instance without one runs once, unless ``opts.schedule`` is set."""
    schedule = " ".join((opts.schedule or "").split())
    if schedule and not _CRON.fullmatch(schedule):
        raise errors.ConfigError(f"invalid schedule '{opts.schedule}': use five cron fields, e.g. '0 * * * *'")
    return f'string | default="{schedule}"'


def _scheduled(opts: patterns.PatternOptions) -> bool:
    """Whether the graph has its scheduled mode (a CronJob): not behind an auth proxy, where
    nobody would be there to deliver each run's token.

    Raises:
        ConfigError: a ``schedule`` with ``auth_proxy``.
    """
    if opts.resolved_provider().settings.auth_proxy_url is None:
        return True
    if opts.schedule:
        raise errors.ConfigError(
            "a scheduled kro graph cannot use auth_proxy: its CronJob makes each run and nobody is there to "
            "deliver the proxy token over exec; read the credential from a Secret (env_from_secret, "
            "oauth_credentials_from_secret), or render without a schedule and run 'ironflow sandbox deliver-token'"
        )
    return False


def _runner_script(runner_kind: str) -> str:
    """Concept 07's run: clear a Runner a killed run left, create one, wait until KRO has made its
    Sandbox and the Sandbox is Finished, print the log; the Runner goes on any exit (trap).
    ``kubectl wait --for=create`` needs kubectl 1.31 or later in the CronJob's image."""
    runner = runner_kind.lower()
    return (
        f"set -euo pipefail; n={_NAME}; r={runner}\n"
        'kubectl delete "$r" "$n" --ignore-not-found\n'
        """trap 'kubectl delete "$r" "$n" --ignore-not-found' EXIT\n"""
        f"kubectl create -f - <<EOF\napiVersion: {KRO_API}\nkind: {runner_kind}\nmetadata: {{name: $n}}\n"
        "spec: {workspacePVC: $n-workspace, memoryPVC: $n-memory}\nEOF\n"
        f'kubectl wait --for=create "sandbox/$n" --timeout={_WAIT_S}s\n'
        f'kubectl wait --for=condition=Finished "sandbox/$n" --timeout={_WAIT_S}s\n'
        'kubectl logs "pod/$n" || true\n'
    )


def _claim_script(api_version: str, ref: str, lifecycle: str) -> str:
    """Concept 08's run: create a claim with a TTL, wait until it is Finished, print its sandbox's
    log (the TTL deletes the claim later); a claim that never finished is deleted on exit."""
    return (
        f"set -euo pipefail; n={_NAME}\n"
        f"c=$(kubectl create -o name -f - <<EOF\napiVersion: {api_version}\nkind: SandboxClaim\n"
        f"metadata: {{generateName: $n-}}\nspec: {{{ref}, {lifecycle}}}\nEOF\n)\n"
        """trap '[ "$?" = 0 ] || kubectl delete "$c" --ignore-not-found' EXIT\n"""
        f'kubectl wait --for=condition=Finished "$c" --timeout={_WAIT_S}s\n'
        """s=$(kubectl get "$c" -o jsonpath='{.status.sandbox.name}')\n"""
        'kubectl logs "pod/$s" || true\n'
    )


def _orchestrator(
    script: str, managed: tuple[str, str], watched: tuple[str, str] | None = None
) -> list[dict[str, Any]]:
    """The scheduled mode: ServiceAccount, Role, RoleBinding and a hardened kubectl CronJob."""
    ns, account = _NAMESPACE, f"{_NAME}-orchestrator"
    rules = [
        {"apiGroups": [managed[0]], "resources": [managed[1]], "verbs": ["create", "get", "list", "watch", "delete"]}
    ]
    if watched is not None:  # read only: the script waits on these
        rules.append({"apiGroups": [watched[0]], "resources": [watched[1]], "verbs": ["get", "list", "watch"]})
    rules.append({"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]})
    rbac = "rbac.authorization.k8s.io/v1"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": account, "namespace": ns}, "rules": rules},
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": account, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        },
    ]
    container = {
        "name": "orchestrator",
        "image": "bitnami/kubectl:latest",
        "command": ["bash", "-c", script],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_spec = {
        "serviceAccountName": account,
        "restartPolicy": "Never",
        "enableServiceLinks": False,  # as on every pod ironflow renders: no other Service's address in its env
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    objects.append(
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": account, "namespace": ns},
            "spec": {
                "schedule": _cel("schema.spec.schedule"),
                "concurrencyPolicy": "Forbid",
                "jobTemplate": {"spec": {"backoffLimit": 0, "template": {"spec": pod_spec}}},
            },
        }
    )
    ids = ("account", "role", "binding", "orchestrator")
    return [_resource(rid, obj, when="schema.spec.schedule != ''") for rid, obj in zip(ids, objects, strict=True)]


def raw_sandbox_rgds(opts: patterns.PatternOptions) -> list[dict[str, Any]]:
    """Concept 07: the Runner RGD (owns a Sandbox) and the user-facing RGD (PVCs, ConfigMap, Runner or CronJob)."""
    runner_kind, user_kind = "ClaudeCodeAgentSandboxRunner", "ClaudeCodeAgentSandbox"
    scheduled = _scheduled(opts)
    # The pod mounts the workspace and memory claims the Runner's spec names.
    provider = (
        opts.resolved_provider()
        .pvc_volume("workspace-claim", patterns.WORKSPACE_PATH)
        .conversations_volume("memory-claim")
    )
    sandbox = models.AgentSandbox(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=kro_pod_template(provider, opts, wait_for_claim=False),
        shutdown_policy=models.ShutdownPolicy.RETAIN,
        labels=patterns.pattern_labels(opts),
    )
    rendered = _templated(rendering.render(sandbox))
    rendered["metadata"]["name"] = _NAME
    for volume in rendered["spec"]["podTemplate"]["spec"]["volumes"]:
        claim = volume.get("persistentVolumeClaim")
        if claim is not None:
            field = {"workspace-claim": "workspacePVC", "memory-claim": "memoryPVC"}[claim["claimName"]]
            claim["claimName"] = _cel(f"schema.spec.{field}")
    finished = "sandbox.status.conditions.exists(c, c.type == 'Finished' && c.status == 'True')"
    runner_rgd = {
        "apiVersion": KRO_API,
        "kind": "ResourceGraphDefinition",
        "metadata": {"name": runner_kind.lower()},
        "spec": {
            "schema": {
                "apiVersion": "v1alpha1",
                "kind": runner_kind,
                "spec": {"workspacePVC": "string | required=true", "memoryPVC": "string | required=true"},
                "status": {"finished": _cel(finished)},
            },
            "resources": [_resource("sandbox", rendered)],
        },
    }
    runner = {
        "apiVersion": KRO_API,
        "kind": runner_kind,
        "metadata": {"name": _NAME},
        "spec": {"workspacePVC": _NAME + "-workspace", "memoryPVC": _NAME + "-memory"},
    }

    def pvc(suffix: str) -> dict[str, Any]:
        obj = patterns.standalone_pvc(opts, "pvc")
        obj["metadata"]["name"] = f"{_NAME}-{suffix}"
        obj["spec"]["resources"]["requests"]["storage"] = _cel("schema.spec.storage")
        return obj

    user_rgd = {
        "apiVersion": KRO_API,
        "kind": "ResourceGraphDefinition",
        "metadata": {"name": user_kind.lower()},
        "spec": {
            "schema": {
                "apiVersion": "v1alpha1",
                "kind": user_kind,
                "spec": {
                    "prompt": "string | required=true",
                    **({"schedule": _schedule_field(opts)} if scheduled else {}),
                    "storage": f'string | default="{opts.storage}"',
                },
            },
            "resources": [
                _resource("workspace", pvc("workspace")),
                _resource("memory", pvc("memory")),
                _resource("prompt", _configmap("prompt", {"prompt": _cel("schema.spec.prompt")})),
                _resource("runner", runner, when="schema.spec.schedule == ''" if scheduled else None),
                *(
                    _orchestrator(
                        _runner_script(runner_kind),
                        ("kro.run", runner_kind.lower() + "s"),
                        watched=("agents.x-k8s.io", "sandboxes"),
                    )
                    if scheduled
                    else []
                ),
            ],
        },
    }
    return [runner_rgd, user_rgd]


def template_rgd(opts: patterns.PatternOptions) -> list[dict[str, Any]]:
    """Concept 08: one RGD owning template, warm pool, prompt ConfigMap, and a claim or a CronJob."""
    scheduled = _scheduled(opts)
    template = models.SandboxTemplate(
        name=opts.name,
        namespace=opts.namespace,
        api_version=opts.api_version,
        pod_template=kro_pod_template(opts.resolved_provider(), opts, wait_for_claim=True),
        network_policy_management=models.NetworkPolicyManagement.MANAGED,
        labels=patterns.pattern_labels(opts),
    )
    rendered = rendering.render_all(patterns.pool_and_claim(opts, template))
    tpl, pool, claim = rendered
    _templated(tpl)
    tpl["metadata"]["name"] = pool["metadata"]["name"] = pool["spec"]["sandboxTemplateRef"]["name"] = _NAME
    pool["spec"]["replicas"] = _cel("schema.spec.replicas")
    claim["metadata"]["name"] = _NAME + "-run"
    del claim["spec"]["lifecycle"]  # KRO owns this claim: a TTL delete would make KRO create it again
    beta = "warmPoolRef" in claim["spec"]
    if beta:
        claim["spec"]["warmPoolRef"]["name"] = _NAME
        ref = "warmPoolRef: {name: $n}"
    else:
        claim["spec"]["sandboxTemplateRef"]["name"] = claim["spec"]["warmpool"] = _NAME
        ref = "sandboxTemplateRef: {name: $n}, warmpool: $n"
    lifecycle = f"lifecycle: {{ttlSecondsAfterFinished: {opts.ttl_seconds_after_finished}, shutdownPolicy: Delete}}"
    rgd = {
        "apiVersion": KRO_API,
        "kind": "ResourceGraphDefinition",
        "metadata": {"name": "claudecodeagenttemplate"},
        "spec": {
            "schema": {
                "apiVersion": "v1alpha1",
                "kind": "ClaudeCodeAgentTemplate",
                "spec": {
                    "prompt": "string | required=true",
                    **({"schedule": _schedule_field(opts)} if scheduled else {}),
                    "replicas": f"integer | default={opts.replicas}",
                },
            },
            "resources": [
                _resource("template", tpl),
                _resource("pool", pool),
                _resource("prompt", _configmap("prompt", {"prompt": _cel("schema.spec.prompt")})),
                _resource("claim", claim, when="schema.spec.schedule == ''" if scheduled else None),
                *(
                    _orchestrator(
                        _claim_script(claim["apiVersion"], ref, lifecycle),
                        ("extensions.agents.x-k8s.io", "sandboxclaims"),
                    )
                    if scheduled
                    else []
                ),
            ],
        },
    }
    return [rgd]
