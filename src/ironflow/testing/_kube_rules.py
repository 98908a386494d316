"""The Kubernetes API's rules that the test server enforces, as pure functions.

Label and field selectors, object names, label keys and values, merge patches, continue
tokens and Status bodies: each is a function of its inputs with no I/O, so the server's
handlers stay thin and these rules can be tested alone. Messages follow the real API
server's wording where callers may match on it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "FieldRequirement",
    "InvalidInput",
    "LabelRequirement",
    "decode_continue",
    "encode_continue",
    "label_errors",
    "matches_fields",
    "matches_labels",
    "merge_patch",
    "name_errors",
    "object_problems",
    "parse_field_selector",
    "parse_label_selector",
    "pod_update_problems",
    "status_body",
    "update_problems",
]

_CONFIGMAP_LIMIT: Final = 1024 * 1024
_ANNOTATIONS_LIMIT: Final = 256 * 1024
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

#: Field selectors each kind supports besides metadata.name and metadata.namespace.
_EXTRA_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "pods": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "jobs": frozenset({"status.successful"}),
    "events": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "source",
            "type",
        }
    ),
    "namespaces": frozenset({"status.phase"}),
}


class InvalidInput(ValueError):
    """A request the real API server would refuse; carries the HTTP status and reason."""

    def __init__(self, message: str, *, code: int = 400, reason: str = "BadRequest") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason


# --- label selectors ---------------------------------------------------------------------

Operator = Literal["=", "!=", "in", "notin", "exists", "!", "gt", "lt"]


@dataclass(frozen=True)
class LabelRequirement:
    """One comma-separated term of a label selector."""

    key: str
    op: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: ``!=`` and ``notin`` also match objects without the key."""
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.op:
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case "exists":
                return present
            case "!":
                return not present
            case "gt" | "lt":
                if not present or not value.lstrip("-").isdigit():
                    return False
                return int(value) > int(self.values[0]) if self.op == "gt" else int(value) < int(self.values[0])
        return False  # pragma: no cover - exhaustive above


_TERM: Final = re.compile(
    r"""^\s*(?:
        (?P<not>!)\s*(?P<nkey>[^\s=!<>(),]+)\s*$                       # !key
      | (?P<skey>[^\s=!<>(),]+)\s+(?P<setop>in|notin)\s*\((?P<vals>[^()]*)\)\s*$   # key in (a,b)
      | (?P<ckey>[^\s=!<>(),]+)\s*(?P<cop>==|=|!=|>|<)\s*(?P<val>[^\s=!<>(),]*)\s*$  # key=value
      | (?P<ekey>[^\s=!<>(),]+)\s*$                                    # key
    )""",
    re.VERBOSE,
)


def _split_terms(selector: str) -> list[str]:
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return terms


def parse_label_selector(selector: str | None) -> tuple[LabelRequirement, ...]:
    """Parse ``a=b,c!=d,e in (f,g),!h,i`` into requirements; ``InvalidInput`` (400) when malformed."""
    if not selector or not selector.strip():
        return ()
    out: list[LabelRequirement] = []
    for term in _split_terms(selector):
        match = _TERM.match(term)
        if match is None:
            raise InvalidInput(
                f"unable to parse requirement: found '{term.strip()}', expected: key, !key, "
                "key=value, key!=value, key in (v1,v2) or key notin (v1,v2)"
            )
        req: LabelRequirement
        if match["nkey"]:
            req = LabelRequirement(match["nkey"], "!")
        elif match["skey"]:
            values = tuple(v.strip() for v in match["vals"].split(",") if v.strip())
            op: Operator = "in" if match["setop"] == "in" else "notin"
            if not values:
                raise InvalidInput(f"unable to parse requirement: for '{op}' operator, values set can't be empty")
            req = LabelRequirement(match["skey"], op, values)
        elif match["ckey"]:
            symbol = match["cop"]
            cop: Operator = {"=": "=", "==": "=", "!=": "!=", ">": "gt", "<": "lt"}[symbol]  # type: ignore[assignment]
            if cop in ("gt", "lt") and not match["val"].lstrip("-").isdigit():
                raise InvalidInput(
                    f"unable to parse requirement: for '{symbol}' operator, the value must be an integer"
                )
            req = LabelRequirement(match["ckey"], cop, (match["val"],))
        else:
            req = LabelRequirement(match["ekey"], "exists")
        problems = _key_errors(req.key) + [
            e for v in req.values if req.op not in ("gt", "lt") for e in _value_errors(v)
        ]
        if problems:
            raise InvalidInput(f"unable to parse requirement: {problems[0]}")
        out.append(req)
    return tuple(out)


def matches_labels(requirements: tuple[LabelRequirement, ...], labels: Mapping[str, str] | None) -> bool:
    """True when every requirement holds for ``labels`` (an empty selector matches everything)."""
    have = labels or {}
    return all(req.matches(have) for req in requirements)


# --- field selectors ---------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    """One term of a field selector: ``field=value`` or ``field!=value``."""

    field: str
    equal: bool
    value: str


def parse_field_selector(selector: str | None, plural: str) -> tuple[FieldRequirement, ...]:
    """Parse a field selector; fields the resource does not index give 400 as on a real server."""
    if not selector or not selector.strip():
        return ()
    allowed = {"metadata.name", "metadata.namespace"} | _EXTRA_FIELDS.get(plural, frozenset())
    out: list[FieldRequirement] = []
    for term in selector.split(","):
        match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if match is None:
            raise InvalidInput(f"invalid selector: '{selector}'; can't understand '{term}'")
        name, op, value = match.groups()
        if name not in allowed:
            raise InvalidInput(f"field label not supported: {name}")
        out.append(FieldRequirement(name, op != "!=", value))
    return tuple(out)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node) if not isinstance(node, Mapping) else ""


def matches_fields(requirements: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    """True when every field requirement holds for ``obj``."""
    return all((_field_value(obj, req.field) == req.value) == req.equal for req in requirements)


# --- names and labels --------------------------------------------------------------------


def name_errors(name: str, *, label: bool = False) -> list[str]:
    """Problems with an object name: RFC 1123 subdomain (or label, for namespaces and Jobs)."""
    if label:
        if len(name) > 63:
            return ["must be no more than 63 characters"]
        if not _DNS_LABEL.match(name):
            return [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character"
            ]
        return []
    if len(name) > 253:
        return ["must be no more than 253 characters"]
    if not _DNS_SUBDOMAIN.match(name):
        return [
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character"
        ]
    return []


def _value_errors(value: str) -> list[str]:
    if len(value) > 63:
        return [f'Invalid value: "{value}": must be no more than 63 characters']
    if not _LABEL_VALUE.match(value):
        return [
            f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ]
    return []


def _key_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    problems: list[str] = []
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        problems.append(f'Invalid value: "{key}": prefix part must be a lowercase RFC 1123 subdomain')
    if not name or len(name) > 63 or not _LABEL_VALUE.match(name):
        problems.append(
            f"Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (at most 63 characters)"
        )
    return problems


def label_errors(labels: Mapping[str, Any] | None) -> list[str]:
    """Problems with ``metadata.labels``, each naming the field as the API server does."""
    problems: list[str] = []
    for key, value in (labels or {}).items():
        problems += [f"metadata.labels: {p}" for p in _key_errors(str(key))]
        if not isinstance(value, str):
            problems.append(f"metadata.labels: Invalid value: {key}: label values must be strings")
        else:
            problems += [f"metadata.labels: {p}" for p in _value_errors(value)]
    return problems


def object_problems(obj: Mapping[str, Any], name: str, *, name_is_label: bool, is_configmap: bool) -> list[str]:
    """What the API server's object validation refuses beyond the schema: the name (or
    generateName), labels, the annotations' total size, and a ConfigMap's 1 MiB of data."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ["metadata: Required value"]
    problems: list[str] = []
    if meta.get("name"):
        problems += [f'metadata.name: Invalid value: "{name}": {p}' for p in name_errors(name, label=name_is_label)]
    elif meta.get("generateName"):
        prefix = str(meta["generateName"])
        problems += [
            f'metadata.generateName: Invalid value: "{prefix}": {p}'
            for p in name_errors(prefix.rstrip("-") + "x" if prefix else "x")
        ]
    else:
        problems.append("metadata.name: Required value: name or generateName is required")
    problems += label_errors(meta.get("labels"))
    annotations = meta.get("annotations") or {}
    if sum(len(str(k)) + len(str(v)) for k, v in annotations.items()) > _ANNOTATIONS_LIMIT:
        problems.append(f"metadata.annotations: Too long: must have at most {_ANNOTATIONS_LIMIT} bytes")
    if is_configmap:
        size = sum(len(str(k)) + len(str(v).encode()) for k, v in (obj.get("data") or {}).items())
        size += sum(len(str(k)) + len(str(v)) * 3 // 4 for k, v in (obj.get("binaryData") or {}).items())
        if size > _CONFIGMAP_LIMIT:
            problems.append(f"[]: Too long: must have at most {_CONFIGMAP_LIMIT} bytes")
    return problems


def pod_update_problems(current: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """A pod's spec is immutable but for images, activeDeadlineSeconds, tolerations (and the
    scheduler's nodeName); any other change is refused."""

    def mutable_view(spec: Mapping[str, Any]) -> Any:
        view = copy.deepcopy(dict(spec))
        for key in ("activeDeadlineSeconds", "tolerations", "nodeName"):
            view.pop(key, None)
        for container in view.get("containers", []) + view.get("initContainers", []):
            container.pop("image", None)
        return view

    if mutable_view(current) == mutable_view(new):
        return []
    return [
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
        "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions "
        "to existing tolerations)"
    ]


def update_problems(kind: str, current: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Fields an update may not change: a pod's spec (but images, deadline, tolerations), an
    immutable ConfigMap's or Secret's data, a Job's selector and template."""
    if kind == "Pod":
        return pod_update_problems(current.get("spec", {}), new.get("spec", {}))
    changed = [key for key in ("data", "binaryData", "stringData", "immutable") if current.get(key) != new.get(key)]
    if kind in ("ConfigMap", "Secret") and current.get("immutable") and changed:
        return ["data: Forbidden: field is immutable when `immutable` is set"]
    if kind == "Job":
        for key in ("selector", "template"):
            if current.get("spec", {}).get(key) != new.get("spec", {}).get(key):
                return [f"spec.{key}: Invalid value: field is immutable"]
    return []


# --- patches, tokens, Status -------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` removes, the rest replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def encode_continue(resource_version: int, after_key: str) -> str:
    """An opaque continue token: the list's resourceVersion and the last key served."""
    raw = json.dumps({"rv": resource_version, "start": after_key}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def decode_continue(token: str) -> tuple[int, str]:
    """Read a continue token; 400 when it is not one of ours."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"continue key is not valid: {token[:40]}") from exc


def status_body(code: int, reason: str, message: str, *, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``kind: Status`` failure body, shaped like the real API server's."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = dict(details)
    return body
