"""The test server's request parsing and Status answers: routes, verbs, query integers, bodies, refusals.

Nothing here reads or changes the store; every refusal carries the Status body a real API
server would send.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from ironflow.testing import _kube_rules as rules
from ironflow.testing import _kube_store as store_mod

__all__ = [
    "Refusal",
    "Route",
    "delete_options",
    "int_param",
    "invalid",
    "json_response",
    "method_not_allowed",
    "no_such_resource",
    "not_found",
    "parse_route",
    "read_body",
    "reason_for",
    "request_verb",
]

Obj = store_mod.Obj
_TRUE: Final = ("true", "1", "True")
_REASONS: Final = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class Refusal(Exception):
    """A request refused with a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = rules.status_body(code, reason, message, details=details)
        self.code = code


@dataclass(frozen=True)
class Route:
    """What a request path names: a served type, its namespace, an object and a subresource."""

    t: store_mod.Type
    namespace: str | None
    name: str | None
    sub: str | None


def json_response(status: int, body: Any) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def no_such_resource() -> Refusal:
    return Refusal(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed() -> Refusal:
    return Refusal(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def not_found(t: store_mod.Type, name: str) -> Refusal:
    return Refusal(
        404,
        "NotFound",
        f'{t.plural}{"." + t.group if t.group else ""} "{name}" not found',
        {"name": name, "group": t.group, "kind": t.plural},
    )


def invalid(t: store_mod.Type, name: str, problems: list[str]) -> Refusal:
    return Refusal(
        422,
        "Invalid",
        f'{t.kind} "{name}" is invalid: ' + ", ".join(problems),
        {"name": name, "group": t.group, "kind": t.kind, "causes": [{"message": p} for p in problems]},
    )


def parse_route(types: Mapping[tuple[str, str, str], store_mod.Type], path: str) -> Route:
    """The route of ``/api/<v>/...`` or ``/apis/<g>/<v>/...``; a path no served type matches is a 404."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise no_such_resource()
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces" and (group, version, rest[2]) in types:
        namespace, rest = rest[1], rest[2:]
    if not rest or (group, version, rest[0]) not in types or len(rest) > 3:
        raise no_such_resource()
    t = types[(group, version, rest[0])]
    if namespace is not None and not t.namespaced:
        raise no_such_resource()
    return Route(t, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)


def request_verb(request: web.Request, name: str | None) -> str:
    """The RBAC verb of a request (``get``, ``list``, ``watch``, ``create``, ... ``deletecollection``)."""
    method = request.method
    if method == "GET":
        if name is not None:
            return "get"
        return "watch" if is_true(request.query, "watch") else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name is not None else "deletecollection",
    }.get(method, method.lower())


def reason_for(status: int) -> str:
    return _REASONS.get(status, "Unknown")


def is_true(query: Mapping[str, str], key: str) -> bool:
    return query.get(key) in _TRUE


def int_param(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise Refusal(400, "BadRequest", f"invalid {key} {raw!r}: must be an integer") from exc


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise Refusal(400, "BadRequest", "the body of the request could not be decoded as JSON") from exc


async def delete_options(request: web.Request) -> Obj:
    """DeleteOptions from the body, or (only without one) the query, as the API server reads them;
    the policy checked."""
    options: Obj = {}
    body = await read_body(request)
    if isinstance(body, dict):
        options.update(
            {k: v for k, v in body.items() if k in ("gracePeriodSeconds", "propagationPolicy", "preconditions")}
        )
    elif body is None:
        if (grace := int_param(request.query, "gracePeriodSeconds")) is not None:
            options["gracePeriodSeconds"] = grace
        if policy := request.query.get("propagationPolicy"):
            options["propagationPolicy"] = policy
    if options.get("propagationPolicy") not in (None, "Orphan", "Background", "Foreground"):
        raise Refusal(
            422,
            "Invalid",
            f'propagationPolicy: Unsupported value: "{options["propagationPolicy"]}": '
            'supported values: "Foreground", "Background", "Orphan"',
        )
    return options
