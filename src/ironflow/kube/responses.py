"""What the Kubernetes API answers, as ironflow values (pure): errors, retry delays, events.

The boundary's mapping: an HTTP status becomes its :mod:`ironflow.errors` class (403, 404,
409, 410, 5xx and "no answer" each their own), a Status body its trimmed reason and
message, a watch line its event, an exec's v4 status its exit code. Messages carry the
verb, the resource and at most ``MESSAGE_LIMIT`` characters of the API's text, never a
request header. No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from ironflow import errors
from ironflow.kube.resources import ExecResult, WatchEvent

__all__ = [
    "MESSAGE_LIMIT",
    "ExecOutput",
    "backoff_delay",
    "delete_options",
    "error_for_status",
    "exec_exit_code",
    "params",
    "retry_after_delay",
    "short",
    "status_message",
    "watch_event",
    "where",
]

#: Longest API message copied into an error (a Status body can hold a whole object).
MESSAGE_LIMIT: Final = 600


def status_message(body: bytes) -> tuple[str, str]:
    """The (reason, message) of a Status body, or ("", trimmed text) when it is not one."""
    text = body.decode(errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        return "", text.strip()[:MESSAGE_LIMIT]
    if isinstance(data, dict):
        return str(data.get("reason", "")), str(data.get("message", ""))[:MESSAGE_LIMIT]
    return "", text.strip()[:MESSAGE_LIMIT]


def error_for_status(status: int, what: str, *, reason: str = "", message: str = "") -> errors.KubernetesError:
    """The ironflow error for an HTTP status (pure): 403, 404, 409, 410, 5xx and 0 get their own class."""
    cls: type[errors.KubernetesError]
    if status == 403:
        cls = errors.KubeForbidden
    elif status == 404:
        cls = errors.KubeNotFound
    elif status == 409:
        cls = errors.KubeConflict
    elif status == 410:
        cls = errors.KubeGone
    elif status == 0 or status >= 500:
        cls = errors.KubeUnavailable
    else:
        cls = errors.KubernetesError
    label = f"HTTP {status}" if status else "no answer"
    detail = f"{reason}: {message}" if reason and message else (message or reason)
    text = f"{what}: {label}" + (f" ({detail[:MESSAGE_LIMIT]})" if detail else "")
    return cls(text, status=status, reason=reason)


def backoff_delay(attempt: int, *, base: float = 0.2, cap: float = 5.0) -> float:
    """Seconds to wait before reconnect ``attempt`` (0-based): doubling from ``base``, capped (pure)."""
    return float(min(cap, base * (2 ** max(0, attempt))))


def retry_after_delay(header: str | None, attempt: int) -> float:
    """Seconds to wait after a 429 (pure): the server's ``Retry-After`` seconds, capped at 10,
    else the reconnect backoff for ``attempt``."""
    if header is not None and header.strip().isdigit():
        return float(min(int(header.strip()), 10))
    return backoff_delay(attempt)


def params(**kwargs: object) -> list[tuple[str, str]]:
    """Query parameters, ``None`` left out, booleans as ``true``/``false``."""
    out: list[tuple[str, str]] = []
    for key, value in kwargs.items():
        if value is None:
            continue
        out.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return out


def delete_options(
    uid: str | None, grace_period_seconds: int | None, propagation_policy: str | None
) -> tuple[list[tuple[str, str]], dict[str, object] | None]:
    """A delete's query and body: its options as query parameters, or with a UID precondition all in a
    DeleteOptions body (the API server reads a body's options or else the query's, never both)."""
    options = {"gracePeriodSeconds": grace_period_seconds, "propagationPolicy": propagation_policy}
    if uid is None:
        return params(**options), None
    body: dict[str, object] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    return [], body | {key: value for key, value in options.items() if value is not None}


def watch_event(line: bytes, what: str) -> WatchEvent | None:
    """One line of a watch stream as an event (None for a blank line); ``ERROR`` lines raise."""
    if not line.strip():
        return None
    try:
        event = json.loads(line)
    except ValueError as exc:  # a torn stream: reconnecting from the last version is safe
        raise error_for_status(0, what, message="the watch stream sent an unreadable event") from exc
    kind = event.get("type")
    obj = event.get("object") or {}
    if kind == "ERROR":
        raise error_for_status(
            int(obj.get("code", 500)),
            what,
            reason=str(obj.get("reason", "")),
            message=str(obj.get("message", ""))[:MESSAGE_LIMIT],
        )
    rv = str(obj.get("metadata", {}).get("resourceVersion", ""))
    return WatchEvent(kind, {} if kind == "BOOKMARK" else obj, resource_version=rv)


def exec_exit_code(status: Mapping[str, Any]) -> int:
    """The exit code in an exec's v4 error-channel Status (pure): 0 on Success, the ExitCode cause else."""
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or ():
        if isinstance(cause, Mapping) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except ValueError:
                break
    raise errors.KubernetesError(f"exec failed: {str(status.get('message', ''))[:MESSAGE_LIMIT]}", status=500)


def where(namespace: str | None, name: str | None, subresource: str | None = None) -> str:
    """``namespace/name[/subresource]`` for messages (``(all namespaces)`` for a cluster-wide list)."""
    ns = namespace if namespace is not None else "(all namespaces)"
    return (f"{ns}/{name}" + (f"/{subresource}" if subresource else "")) if name else ns


def short(exc: BaseException) -> str:
    """``: first line`` of an exception, trimmed, for messages (empty when it has none)."""
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f": {text}" if text else ""


class ExecOutput:
    """The frames of an exec's v4 channel protocol, collected: stdout (1), stderr (2), status (3).

    Each stream keeps at most ``max_bytes`` (``truncated`` says when more came);
    ``on_output(stream, chunk)`` sees every chunk as it arrives, kept or not.
    """

    def __init__(self, max_bytes: int, on_output: Callable[[int, bytes], None] | None = None) -> None:
        self._max = max_bytes
        self._on_output = on_output
        self._out = {1: bytearray(), 2: bytearray()}
        self._truncated = False
        self._status: dict[str, Any] | None = None

    def feed(self, frame: bytes) -> None:
        """One websocket frame: its first byte is the channel."""
        if not frame:
            return
        channel, payload = frame[0], frame[1:]
        if channel in self._out:
            if self._on_output is not None:
                self._on_output(channel, payload)
            room = self._max - len(self._out[channel])
            self._truncated = self._truncated or len(payload) > room
            self._out[channel] += payload[: max(room, 0)]
        elif channel == 3 and payload:
            self._status = json.loads(payload)

    def result(self, what: str) -> ExecResult:
        """The exit code and output; ``KubeUnavailable`` when no status frame came."""
        if self._status is None:
            raise error_for_status(0, what, message="the connection closed without an exit status")
        out = self._out
        return ExecResult(exec_exit_code(self._status), bytes(out[1]), bytes(out[2]), truncated=self._truncated)
