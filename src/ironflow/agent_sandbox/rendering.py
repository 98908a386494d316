"""Render agent-sandbox values into API objects, checked by the CRD schema and by the rules
the schema cannot express (pure).

``render(value)`` returns the object as a dict: first :func:`~ironflow.agent_sandbox.rules.check`
(each refusal is a :class:`~ironflow.errors.ConfigError` naming the field and the fix), then the
shipped CRD schema of the value's API version (:mod:`ironflow.agent_sandbox.schemas`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from ironflow import errors
from ironflow.agent_sandbox import models, rules, schemas

__all__ = ["api_version", "render", "render_all", "rfc3339"]


def api_version(value: models.AgentSandboxObject) -> str:
    """``<group>/<version>`` of a value."""
    group = models.CORE_GROUP if isinstance(value, models.AgentSandbox) else models.EXTENSIONS_GROUP
    return f"{group}/{value.api_version}"


def rfc3339(moment: datetime) -> str:
    """A timezone-aware moment as RFC 3339 in UTC, second precision.

    >>> from datetime import datetime, timezone
    >>> rfc3339(datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc))
    '2026-12-31T23:59:59Z'
    """
    if moment.tzinfo is None:
        raise errors.ConfigError("shutdown time needs a timezone (a naive datetime is ambiguous); use UTC")
    m = moment.astimezone(UTC)
    # Not strftime: it writes year 999 as "999", which RFC 3339 (four digits) refuses.
    return f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}Z"


# --- rendering ---------------------------------------------------------------------------


def _metadata(value: models.AgentSandboxObject) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": value.name, "namespace": value.namespace}
    if value.labels:
        meta["labels"] = dict(value.labels)
    if value.annotations:
        meta["annotations"] = dict(value.annotations)
    return meta


def _pod_template(template: models.PodTemplate) -> dict[str, Any]:
    out: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    if template.labels:
        meta["labels"] = dict(template.labels)
    if template.annotations:
        meta["annotations"] = dict(template.annotations)
    if meta:
        out["metadata"] = meta
    out["spec"] = _plain(template.spec)
    return out


def _plain(value: Any) -> Any:
    """Deep copy into plain dicts and lists (mapping proxies and tuples become JSON types)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _vct(vct: models.VolumeClaimTemplate) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": vct.name}
    if vct.labels:
        meta["labels"] = dict(vct.labels)
    spec: dict[str, Any] = {"accessModes": list(vct.access_modes), "resources": {"requests": {"storage": vct.storage}}}
    if vct.storage_class_name is not None:
        spec["storageClassName"] = vct.storage_class_name
    return {"metadata": meta, "spec": spec}


def _set(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = str(value) if isinstance(value, StrEnum) else value


def _spec(value: models.AgentSandboxObject) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if isinstance(value, models.AgentSandbox):
        spec["podTemplate"] = _pod_template(value.pod_template)
        if value.volume_claim_templates:
            spec["volumeClaimTemplates"] = [_vct(v) for v in value.volume_claim_templates]
        _set(spec, "replicas", value.replicas)
        _set(spec, "operatingMode", value.operating_mode)
        _set(spec, "shutdownTime", value.shutdown_time)
        _set(spec, "shutdownPolicy", value.shutdown_policy)
        _set(spec, "service", value.service)
    elif isinstance(value, models.SandboxTemplate):
        spec["podTemplate"] = _pod_template(value.pod_template)
        if value.volume_claim_templates:
            spec["volumeClaimTemplates"] = [_vct(v) for v in value.volume_claim_templates]
        _set(spec, "networkPolicyManagement", value.network_policy_management)
        if value.network_policy is not None:
            spec["networkPolicy"] = {
                "ingress": [_plain(r) for r in value.network_policy.ingress],
                "egress": [_plain(r) for r in value.network_policy.egress],
            }
        _set(spec, "envVarsInjectionPolicy", value.env_vars_injection_policy)
        _set(spec, "volumeClaimTemplatesPolicy", value.volume_claim_templates_policy)
        _set(spec, "service", value.service)
    elif isinstance(value, models.SandboxClaim):
        if value.api_version is models.ApiVersion.V1ALPHA1:
            spec["sandboxTemplateRef"] = {"name": value.template}
            _set(spec, "warmpool", value.warm_pool)
        else:
            spec["warmPoolRef"] = {"name": value.warm_pool}
        if value.lifecycle is not None:
            lifecycle: dict[str, Any] = {}
            _set(lifecycle, "shutdownTime", value.lifecycle.shutdown_time)
            _set(lifecycle, "ttlSecondsAfterFinished", value.lifecycle.ttl_seconds_after_finished)
            _set(lifecycle, "shutdownPolicy", value.lifecycle.shutdown_policy)
            spec["lifecycle"] = lifecycle
        if value.pod_labels or value.pod_annotations:
            extra: dict[str, Any] = {}
            if value.pod_labels:
                extra["labels"] = dict(value.pod_labels)
            if value.pod_annotations:
                extra["annotations"] = dict(value.pod_annotations)
            spec["additionalPodMetadata"] = extra
        if value.env:
            spec["env"] = [
                {"name": e.name, "value": e.value, **({"containerName": e.container_name} if e.container_name else {})}
                for e in value.env
            ]
        if value.volume_claim_templates:
            spec["volumeClaimTemplates"] = [_vct(v) for v in value.volume_claim_templates]
    else:
        _set(spec, "replicas", value.replicas)
        spec["sandboxTemplateRef"] = {"name": value.template}
        if value.update_strategy is not None:
            spec["updateStrategy"] = {"type": str(value.update_strategy)}
    return spec


def render(
    value: models.AgentSandboxObject,
    *,
    template: models.SandboxTemplate | None = None,
    allowed_label_domains: Sequence[str] = rules.DEFAULT_ALLOWED_LABEL_DOMAINS,
    release: str | None = None,
) -> dict[str, Any]:
    """The API object of ``value``, checked (:func:`~ironflow.agent_sandbox.rules.check`) and
    validated against its CRD schema.

    Raises:
        ConfigError: a broken rule, or what the schema refuses (field paths named).
    """
    rules.check(value, template=template, allowed_label_domains=allowed_label_domains)
    obj = {"apiVersion": api_version(value), "kind": value.kind, "metadata": _metadata(value), "spec": _spec(value)}
    schemas.validate(obj, release=release)
    return obj


def render_all(
    values: Sequence[models.AgentSandboxObject],
    *,
    allowed_label_domains: Sequence[str] = rules.DEFAULT_ALLOWED_LABEL_DOMAINS,
) -> list[dict[str, Any]]:
    """Render several values; each claim is checked against the template it uses, when it is in the list.

    A v1beta1 claim finds its template through its pool; a v1alpha1 claim names it.
    """
    templates = {(t.namespace, t.name): t for t in values if isinstance(t, models.SandboxTemplate)}
    pools = {(p.namespace, p.name): p for p in values if isinstance(p, models.SandboxWarmPool)}
    out = []
    for value in values:
        template = None
        if isinstance(value, models.SandboxClaim):
            name = value.template
            if value.api_version is models.ApiVersion.V1BETA1 and value.warm_pool is not None:
                pool = pools.get((value.namespace, value.warm_pool))
                name = pool.template if pool is not None else None
            template = templates.get((value.namespace, name or ""))
        out.append(render(value, template=template, allowed_label_domains=allowed_label_domains))
    return out
