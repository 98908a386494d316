"""The rules the agent-sandbox CRD schemas cannot express (pure): :func:`check` refuses a value,
:func:`claim_warnings` names what is allowed but probably not meant.

:func:`~ironflow.agent_sandbox.rendering.render` applies :func:`check` before the schema; each
refusal is a :class:`~ironflow.errors.ConfigError` naming the field and the fix.

=====================================  ===============================================================
rule                                   why
=====================================  ===============================================================
``shutdownTime`` is RFC 3339           the schema says ``format: date-time`` but the API does not check
PVC ``<vct>-<sandbox>``: VCT name a    the VCT name becomes a pod volume name (DNS label), the PVC name
DNS label, PVC name <= 253             a DNS subdomain; warm-pool members are ``<pool>-<5 chars>``
Service name <= 63                     ``service: true`` names a Service after the Sandbox
claim env needs the template's         ``Disallowed`` (the default) rejects the claim; ``Allowed``
``envVarsInjectionPolicy``             refuses overriding a template var and containers using envFrom;
                                       any claim env (and claim VCT) forces a cold start: a warning;
                                       v1alpha1 (0.4.x) refuses env unless ``warmpool: none``
warm-pool policy                       v1alpha1 ``warmpool`` is ``none``, ``default`` or a pool name;
                                       v1beta1 ``warmPoolRef`` names a pool (no policy words); so no
                                       pool may be named ``none`` or ``default``
reserved ``agents.x-k8s.io/*`` keys    the controllers own them (and drop them from pod templates)
label keys and values                  the API's syntax, checked by the shared ``ironflow.labels`` rules
claim pod metadata                     v1beta1 (v0.5+): label keys need an allowed domain prefix,
                                       annotation keys in kubernetes.io, k8s.io, agents.x-k8s.io are
                                       rejected (but the autoscaler's safe-to-evict); v1alpha1
                                       (v0.4.x): those domains are rejected on both, no exemption
fields of the other API version        ``replicas`` vs ``operatingMode``, ``sandboxTemplateRef`` vs
                                       ``warmPoolRef``...
=====================================  ===============================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from ironflow import errors, labels
from ironflow.agent_sandbox import models

__all__ = [
    "ALLOWED_POD_ANNOTATION",
    "DEFAULT_ALLOWED_LABEL_DOMAINS",
    "RESERVED_PREFIXES",
    "WARM_MEMBER_SUFFIX_LEN",
    "check",
    "claim_warnings",
    "is_rfc3339",
    "pvc_name",
    "raw_object_problem",
]

RESERVED_PREFIXES: Final = (models.CORE_GROUP + "/", models.EXTENSIONS_GROUP + "/")
#: What the claim controller allows when ``/etc/sandbox-config/allowed-label-domains`` is absent.
DEFAULT_ALLOWED_LABEL_DOMAINS: Final = ("sandbox.users.io",)
#: The one annotation of a protected domain a claim may set on its pod.
ALLOWED_POD_ANNOTATION: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
_PROTECTED_ANNOTATION_DOMAINS: Final = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
#: A warm-pool member is named ``<pool>-`` plus this many random characters.
WARM_MEMBER_SUFFIX_LEN: Final = 5
_RFC3339: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})",
)
_POOL_POLICIES: Final = ("none", "default")


# --- small pure helpers ------------------------------------------------------------------


def is_rfc3339(text: str) -> bool:
    """Whether ``text`` is an RFC 3339 date-time with an offset (what the controller parses).

    >>> is_rfc3339("2026-12-31T23:59:59Z"), is_rfc3339("2026-12-31 23:59"), is_rfc3339("2026-02-30T00:00:00Z")
    (True, False, False)
    """
    if _RFC3339.fullmatch(text) is None:
        return False
    try:
        datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def pvc_name(vct: str, sandbox: str) -> str:
    """The PVC the controller makes for a volume claim template (no ordinal).

    >>> pvc_name("workspace", "claude-dev-sandbox")
    'workspace-claude-dev-sandbox'
    """
    return f"{vct}-{sandbox}"


def _fail(message: str) -> errors.ConfigError:
    return errors.ConfigError(message)


def _check_name(kind: str, name: str, *, label: bool = False) -> None:
    limit, valid, what = (
        (63, labels.is_dns_label, "DNS label") if label else (253, labels.is_dns_subdomain, "DNS subdomain")
    )
    if not name:
        raise _fail(f"{kind} name must not be empty")
    if not valid(name):
        raise _fail(
            f"{kind} name '{name}' is not a valid {what} (lowercase letters, digits, '-', at most {limit} characters)"
        )


def _check_keys(where: str, mapping: Mapping[str, str]) -> None:
    for key in mapping:
        if key.startswith(RESERVED_PREFIXES):
            raise _fail(
                f"{where} key '{key}' is reserved: the agent-sandbox controllers own agents.x-k8s.io/* keys; "
                "use your own domain"
            )


def _check_labels(where: str, mapping: Mapping[str, str]) -> None:
    """Reserved keys first (the clearer fix), then the syntax the API server would refuse."""
    _check_keys(where, mapping)
    for key, value in mapping.items():
        problem = labels.label_key_problem(key) or labels.label_value_problem(key, value)
        if problem is not None:
            raise _fail(f"{where}: {problem}")


def _check_time(where: str, value: str | None) -> None:
    if value is not None and not is_rfc3339(value):
        raise _fail(
            f"{where} '{value}' is not an RFC 3339 date-time; write it like 2026-12-31T23:59:59Z "
            "(date, 'T', time, and 'Z' or an offset)"
        )


def _check_vcts(kind: str, vcts: Sequence[models.VolumeClaimTemplate], sandbox_names: Sequence[str]) -> None:
    seen: set[str] = set()
    for vct in vcts:
        _check_name("volume claim template", vct.name, label=True)
        if vct.name in seen:
            raise _fail(f"{kind} has two volume claim templates named '{vct.name}'")
        seen.add(vct.name)
        _check_labels(f"volume claim template '{vct.name}' label", vct.labels)
        for sandbox in sandbox_names:
            pvc = pvc_name(vct.name, sandbox)
            if len(pvc) > 253:
                raise _fail(
                    f"PVC name '{pvc[:40]}...' ({len(pvc)} characters) of volume claim template '{vct.name}' "
                    f"exceeds 253: shorten the template or the sandbox name"
                )


def _check_metadata(kind: str, value: models.AgentSandboxObject) -> None:
    _check_name(kind, value.name)
    _check_name(f"{kind} namespace", value.namespace, label=True)
    _check_labels(f"{kind} label", value.labels)
    _check_keys(f"{kind} annotation", value.annotations)


def _check_pod_template(kind: str, template: models.PodTemplate) -> None:
    _check_labels(f"{kind} pod template label", template.labels)
    _check_keys(f"{kind} pod template annotation", template.annotations)
    containers = template.spec.get("containers") or []
    if not containers:
        raise _fail(f"{kind} pod template needs at least one container")


def _containers(template: models.SandboxTemplate) -> list[Mapping[str, Any]]:
    spec = template.pod_template.spec
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _domain(key: str) -> str | None:
    return key.split("/", 1)[0] if "/" in key else None


def _in_domains(domain: str, domains: Sequence[str]) -> bool:
    return any(domain == d or domain.endswith("." + d) for d in domains)


def _check_protected(where: str, key: str, *, exempt: bool) -> None:
    domain = _domain(key)
    if (exempt and key == ALLOWED_POD_ANNOTATION) or domain is None:
        return
    if _in_domains(domain, _PROTECTED_ANNOTATION_DOMAINS):
        raise _fail(
            f"{where} '{key}' is in a protected domain (kubernetes.io, k8s.io, agents.x-k8s.io); use your own domain"
        )


def _check_claim_pod_metadata(claim: models.SandboxClaim, allowed_label_domains: Sequence[str]) -> None:
    """v0.4.x (v1alpha1) refuses protected domains on both; v0.5+ (v1beta1) allow-lists label domains."""
    alpha = claim.api_version is models.ApiVersion.V1ALPHA1
    _check_labels("claim pod label", claim.pod_labels)
    for key in claim.pod_labels:
        if alpha:
            _check_protected("claim pod label", key, exempt=False)
            continue
        domain = _domain(key)
        if domain is None or not _in_domains(domain, allowed_label_domains):
            raise _fail(
                f"claim pod label '{key}' needs a domain prefix the controller allows "
                f"({', '.join(allowed_label_domains)}); add the domain to the controller's "
                "/etc/sandbox-config/allowed-label-domains or put the label on the claim itself"
            )
    for key in claim.pod_annotations:
        _check_protected("claim pod annotation", key, exempt=not alpha)


def _alpha_claim_env_problem(name: str, env_names: Sequence[str], warm_pool: str | None) -> str | None:
    """The 0.4.x controller's refusal of a v1alpha1 claim with env that may adopt a warm sandbox."""
    if env_names and warm_pool != "none":
        return (
            f"v1alpha1 claim '{name}' sets env ({', '.join(env_names)}): agent-sandbox 0.4.x refuses that "
            "unless the claim's warm pool policy 'none' (a cold start) is set"
        )
    return None


def raw_object_problem(obj: Mapping[str, Any]) -> str | None:
    """What :func:`check` refuses that a raw API object shows without its template, or None; so
    :func:`~ironflow.agent_sandbox.schemas.validate` refuses what ``render`` refuses, in its words.

    >>> spec = {"warmpool": "default", "env": [{"name": "A", "value": "x"}]}
    >>> claim = {"kind": "SandboxClaim", "apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "spec": spec}
    >>> raw_object_problem(claim).split(":")[0]
    "v1alpha1 claim '?' sets env (A)"
    """
    alpha_claim = obj.get("kind") == "SandboxClaim" and str(obj.get("apiVersion", "")).endswith("/v1alpha1")
    spec, metadata = obj.get("spec"), obj.get("metadata")
    if not alpha_claim or not isinstance(spec, Mapping) or not isinstance(spec.get("env"), list):
        return None  # the schema names what is malformed
    names = [str(e.get("name")) for e in spec["env"] if isinstance(e, Mapping)]
    name = str(metadata.get("name", "?")) if isinstance(metadata, Mapping) else "?"
    warm_pool = spec.get("warmpool")
    return _alpha_claim_env_problem(name, names, warm_pool if isinstance(warm_pool, str) else None)


def _check_claim_env(claim: models.SandboxClaim, template: models.SandboxTemplate | None) -> None:
    if not claim.env:
        return
    names = [e.name for e in claim.env]
    if claim.api_version is models.ApiVersion.V1ALPHA1:
        problem = _alpha_claim_env_problem(claim.name, names, claim.warm_pool)
        if problem is not None:
            raise _fail(problem)
    if template is None:
        return  # the controller decides; render_all passes the template when it knows it
    policy = template.injection_policy
    if policy is models.EnvVarsInjectionPolicy.DISALLOWED:
        raise _fail(
            f"claim '{claim.name}' sets env ({', '.join(names)}) but template '{template.name}' has "
            "envVarsInjectionPolicy Disallowed (the default): set it to Allowed or Overrides, or drop the env"
        )
    containers = _containers(template)
    by_name = {str(c.get("name")): c for c in containers}
    main = (template.pod_template.spec.get("containers") or [{}])[0]
    for entry in claim.env:
        if not entry.name:
            raise _fail(f"claim '{claim.name}' has an env var without a name")
        target = by_name.get(entry.container_name) if entry.container_name else main
        if target is None:
            raise _fail(
                f"claim env '{entry.name}' names container '{entry.container_name}', which template "
                f"'{template.name}' does not have (containers: {', '.join(by_name)})"
            )
        if policy is models.EnvVarsInjectionPolicy.ALLOWED:
            existing = {str(e.get("name")) for e in target.get("env") or []}
            if entry.name in existing:
                raise _fail(
                    f"claim env '{entry.name}' overrides a variable of template '{template.name}', which "
                    "envVarsInjectionPolicy Allowed refuses: use Overrides"
                )
            if target.get("envFrom"):
                raise _fail(
                    f"claim env '{entry.name}' targets container '{target.get('name')}', which uses envFrom: "
                    "envVarsInjectionPolicy Allowed refuses that; use Overrides"
                )


def _check_pool_ref(claim: models.SandboxClaim) -> None:
    if claim.api_version is models.ApiVersion.V1ALPHA1:
        if not claim.template:
            raise _fail(f"v1alpha1 claim '{claim.name}' needs template (spec.sandboxTemplateRef.name)")
        _check_name("claim template", claim.template)
        pool = claim.warm_pool
        if pool is not None and pool not in _POOL_POLICIES and not labels.is_dns_subdomain(pool):
            raise _fail(
                f"warm pool policy '{pool}' must be 'none', 'default' or the name of a "
                "SandboxWarmPool in the claim's namespace"
            )
        if claim.volume_claim_templates:
            raise _fail("claim volume claim templates need API version v1beta1")
        return
    if claim.template is not None:
        raise _fail(
            f"v1beta1 claim '{claim.name}' names a pool, not a template: set warm_pool to the SandboxWarmPool "
            "of the template (template is the v1alpha1 sandboxTemplateRef)"
        )
    if not claim.warm_pool:
        raise _fail(
            f"v1beta1 claim '{claim.name}' needs warm_pool (spec.warmPoolRef.name); for cold starts only, "
            "point it at a pool with replicas: 0"
        )
    if claim.warm_pool in _POOL_POLICIES:
        raise _fail(
            f"warmPoolRef '{claim.warm_pool}' is a v1alpha1 policy word, not a pool: v1beta1 claims name a "
            "SandboxWarmPool (use a pool with replicas: 0 for cold starts)"
        )
    _check_name("claim warm pool", claim.warm_pool)


def claim_warnings(claim: models.SandboxClaim) -> tuple[str, ...]:
    """What is allowed but probably not meant (pure): per-claim env or VCTs defeat the warm pool."""
    out: list[str] = []
    if claim.env:
        out.append(
            f"claim '{claim.name}' sets env: the controller cannot adopt a warm sandbox for it and "
            "cold-starts one (slower); bake the variables into the template to keep warm starts"
        )
    if claim.volume_claim_templates:
        out.append(f"claim '{claim.name}' has volume claim templates: it always cold-starts a sandbox")
    return tuple(out)


def _check_sandbox(value: models.AgentSandbox) -> None:
    alpha = value.api_version is models.ApiVersion.V1ALPHA1
    _check_pod_template(value.kind, value.pod_template)
    _check_time("Sandbox shutdownTime", value.shutdown_time)
    if value.shutdown_policy is models.ShutdownPolicy.DELETE_FOREGROUND:
        raise _fail("Sandbox shutdownPolicy must be Delete or Retain (DeleteForeground is for claims)")
    if alpha and value.operating_mode is not None:
        raise _fail("operating_mode is v1beta1; a v1alpha1 Sandbox suspends with replicas: 0")
    if not alpha and value.replicas is not None:
        raise _fail("replicas is v1alpha1; a v1beta1 Sandbox suspends with operating_mode Suspended")
    if value.replicas is not None and value.replicas not in (0, 1):
        raise _fail(f"Sandbox replicas must be 0 or 1, got {value.replicas}")
    if value.service:
        _check_name("Sandbox (its Service takes the name)", value.name, label=True)
    _check_vcts(value.kind, value.volume_claim_templates, [value.name])


def _check_template(value: models.SandboxTemplate) -> None:
    _check_pod_template(value.kind, value.pod_template)
    if value.api_version is models.ApiVersion.V1ALPHA1 and value.volume_claim_templates_policy is not None:
        raise _fail("volume_claim_templates_policy is v1beta1 only")
    if value.network_policy is not None and value.network_policy_management is models.NetworkPolicyManagement.UNMANAGED:
        raise _fail("network_policy rules need network_policy_management Managed (Unmanaged ignores them)")
    # Cold claims name the Sandbox after the claim; only its length is unknown here.
    _check_vcts(value.kind, value.volume_claim_templates, [])


def _check_claim(
    value: models.SandboxClaim, template: models.SandboxTemplate | None, allowed_label_domains: Sequence[str]
) -> None:
    _check_pool_ref(value)
    if value.lifecycle is not None:
        _check_time("claim lifecycle.shutdownTime", value.lifecycle.shutdown_time)
        ttl = value.lifecycle.ttl_seconds_after_finished
        if ttl is not None and not 0 <= ttl <= 2**31 - 1:
            raise _fail(f"ttlSecondsAfterFinished must be between 0 and 2147483647, got {ttl}")
    _check_claim_pod_metadata(value, allowed_label_domains)
    _check_claim_env(value, template)
    if template is None:
        _check_vcts(value.kind, value.volume_claim_templates, [value.name])
        return
    names = [value.name]
    if value.warm_pool and value.warm_pool not in _POOL_POLICIES:
        names.append(value.warm_pool + "-" + "x" * WARM_MEMBER_SUFFIX_LEN)
    _check_vcts(value.kind, (*template.volume_claim_templates, *value.volume_claim_templates), names)


def _check_pool(value: models.SandboxWarmPool) -> None:
    if value.name in _POOL_POLICIES:
        raise _fail(
            f"SandboxWarmPool name '{value.name}' is a v1alpha1 warm-pool policy word, so no claim can name it "
            "(v1alpha1 reads it as the policy, v1beta1 claims refuse it): choose another pool name"
        )
    _check_name("SandboxWarmPool template", value.template)
    if value.api_version is models.ApiVersion.V1ALPHA1 and value.replicas is None:
        raise _fail("a v1alpha1 SandboxWarmPool needs replicas (0 or more)")
    if value.replicas is not None and value.replicas < 0:
        raise _fail(f"warm pool replicas must be 0 or more, got {value.replicas}")


def check(
    value: models.AgentSandboxObject,
    *,
    template: models.SandboxTemplate | None = None,
    allowed_label_domains: Sequence[str] = DEFAULT_ALLOWED_LABEL_DOMAINS,
) -> None:
    """Apply the rules the schema cannot express; ``template`` is a claim's template, when known.

    Raises:
        ConfigError: the first broken rule, naming the field and the fix.
    """
    _check_metadata(value.kind, value)
    if isinstance(value, models.AgentSandbox):
        _check_sandbox(value)
    elif isinstance(value, models.SandboxTemplate):
        _check_template(value)
    elif isinstance(value, models.SandboxClaim):
        _check_claim(value, template, allowed_label_domains)
    else:
        _check_pool(value)
