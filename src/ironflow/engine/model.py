"""Runs and steps as stored values: ids, states, records and their JSON forms (pure).

Nothing here does I/O. Every value a store keeps is a frozen dataclass whose JSON form
round-trips, so a run executed again on another machine sees exactly what was recorded.
Invariant: a record never carries a credential (an ``AccountLease`` is dropped by
``AgentConfig.to_dict`` and results name only the account id).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, NewType

from ironflow import errors, results, secrets
from ironflow.results import AgentResult

__all__ = [
    "AGENT_RESULT_MARK",
    "FINISHED_RUN_STATES",
    "RateWindow",
    "RunId",
    "RunRecord",
    "RunStatus",
    "StepId",
    "StepKind",
    "StepRecord",
    "StepStatus",
    "TranscriptChunk",
    "TranscriptStream",
    "Usage",
    "WindowStatus",
    "error_record",
    "from_json",
    "new_id",
    "result_from_dict",
    "result_to_dict",
    "stored_json",
    "to_json",
    "uuid7",
]

RunId = NewType("RunId", str)
StepId = NewType("StepId", str)


class RunStatus(StrEnum):
    """pending → running → succeeded | failed | cancelled (a retried run goes back to pending)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED_RUN_STATES: Final = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


class StepKind(StrEnum):
    """What a step runs; replay compares it with the name at each position."""

    AGENT = "agent"
    OP = "op"
    SUB_WORKFLOW = "sub_workflow"


class StepStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


# --- UUIDv7 ------------------------------------------------------------------------------

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """A version-7 UUID: 48-bit unix milliseconds, then a 12-bit counter, then random bits.

    Ids made by one process sort in creation order even within one millisecond (RFC 9562
    method 1), so ``ORDER BY id`` lists runs oldest first.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if ms <= _last_ms:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
            ms = _last_ms
        else:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x3FF  # room to count up
        counter = _counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
    return uuid.UUID(int=value)


def new_id() -> str:
    """A UUIDv7 in canonical lowercase hyphenated form, as label values need it."""
    return str(uuid7())


# --- records -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One run as the store holds it. ``workflow`` is an import reference (``module:function``)."""

    id: str
    workflow: str
    input: Any
    status: RunStatus = RunStatus.PENDING
    root_run_id: str = ""
    parent_run_id: str | None = None
    backend: str | None = None
    output: Any = None
    error: Mapping[str, Any] | None = None
    attempt: int = 0
    worker: str | None = None
    lease_until: float | None = None
    available_at: float = 0.0
    cancel_requested: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    #: The absolute time (epoch seconds) the whole run must end by, across resumes and retries;
    #: a sub-workflow carries its root's. None: no deadline.
    deadline_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", RunStatus(self.status))
        if not self.root_run_id:
            object.__setattr__(self, "root_run_id", self.id)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_RUN_STATES

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["status"] = str(self.status)
        out["error"] = dict(self.error) if self.error is not None else None
        return out


@dataclass(frozen=True)
class StepRecord:
    """One step of a run at its position; ``result`` is JSON (an agent result as a dict)."""

    run_id: str
    position: int
    name: str
    kind: StepKind
    id: str = ""
    status: StepStatus = StepStatus.RUNNING
    result: Any = None
    error: Mapping[str, Any] | None = None
    attempts: int = 0
    child_run_id: str | None = None
    labels: Mapping[str, str] | None = None
    started_at: float = 0.0
    finished_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", StepKind(self.kind))
        object.__setattr__(self, "status", StepStatus(self.status))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["kind"] = str(self.kind)
        out["status"] = str(self.status)
        out["error"] = dict(self.error) if self.error is not None else None
        out["labels"] = dict(self.labels) if self.labels is not None else None
        if isinstance(self.result, AgentResult):  # its own JSON form (a workspace patch is bytes)
            out["result"] = result_to_dict(self.result)
        return out


@dataclass(frozen=True)
class Usage:
    """Tokens and cost of agent steps, summed: one step's, a run's, a run tree's.

    Only an agent step that returned a result counts (a failed attempt's usage is not stored);
    the stores' ``run_totals`` sum the same fields in SQL, so both agree with :meth:`of_step`.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    agent_steps: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
            self.agent_steps + other.agent_steps,
        )

    @classmethod
    def of_step(cls, step: StepRecord) -> Usage:
        result = step.result
        if step.kind is not StepKind.AGENT or not isinstance(result, AgentResult):
            return cls()
        return cls(result.input_tokens or 0, result.output_tokens or 0, result.cost_usd or 0.0, 1)


class TranscriptStream(StrEnum):
    """Where a transcript line came from: the agent's stdout (stream-json), its stderr, or the
    engine's own notes (an attempt's end, what the size cap dropped)."""

    STDOUT = "stdout"
    STDERR = "stderr"
    IRONFLOW = "ironflow"


@dataclass(frozen=True)
class TranscriptChunk:
    """Consecutive lines of one stream of one attempt of a step, stored as one row.

    ``seq`` orders the chunks of a run; the store numbers them as it appends (0 before).
    """

    run_id: str
    position: int
    step: str
    attempt: int
    stream: TranscriptStream
    text: str
    at: float
    seq: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "stream", TranscriptStream(self.stream))

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")


def error_record(exc: BaseException) -> dict[str, Any]:
    """How a failure is stored: its type, message and whether a retry could help.

    Only the message is kept (never ``args`` or attributes). Ironflow errors keep secrets out of
    their messages, but a failed agent's message carries its output: credential shapes in it
    are redacted, as in a transcript.
    """
    message = exc.message if isinstance(exc, errors.IronflowError) else str(exc)
    return {
        "type": type(exc).__name__,
        "message": errors.truncate(secrets.redact(message), 4000),
        "retryable": bool(getattr(exc, "retryable", False)),
    }


# --- AgentResult <-> dict (ironflow.results, kept here under their engine names) ------------

#: The key that marks a stored agent result (its JSON form), for the stores' SQL too.
AGENT_RESULT_MARK: Final = results.AGENT_RESULT_MARK
result_to_dict = results.result_to_dict
result_from_dict = results.result_from_dict


def _json_default(value: Any) -> Any:
    if isinstance(value, AgentResult):
        return result_to_dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def to_json(value: Any, *, what: str) -> str:
    """Encode a step result or run output for storage; ``what`` names it in the error.

    Raises:
        UnstorableValue: the value cannot be stored; the message says what and how to fix it.
    """
    try:
        return json.dumps(value, default=_json_default, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise errors.UnstorableValue(
            f"{what} cannot be stored: {exc}; return JSON values (dict, list, str, number, bool, None), "
            "an AgentResult or a dataclass"
        ) from None


def stored_json(value: Any, *, what: str) -> str:
    """:func:`to_json` with credential shapes redacted in every string, keys too, as a transcript's
    lines are (:func:`ironflow.secrets.redact`): what a step returned or a run output goes to the
    store so. The workflow itself gets the value as it was. An agent result's workspace patch
    stays exact: it is the step's change to the user's tree, and a patch with a word replaced
    would no longer apply.

    Raises:
        UnstorableValue: as :func:`to_json`.
    """
    return json.dumps(_redacted(json.loads(to_json(value, what=what))), separators=(",", ":"))


def _redacted(doc: Any) -> Any:
    if isinstance(doc, str):
        return secrets.redact(doc)
    if isinstance(doc, list):
        return [_redacted(item) for item in doc]
    if isinstance(doc, dict):
        keep = "workspace" if doc.get(AGENT_RESULT_MARK) == 1 else None
        return {secrets.redact(k): v if k == keep else _redacted(v) for k, v in doc.items()}
    return doc


def from_json(raw: str | None) -> Any:
    """Decode a stored value, turning marked agent results back into ``AgentResult``."""
    if raw is None:
        return None
    return json.loads(raw, object_hook=result_from_dict)


class WindowStatus(StrEnum):
    ALLOWED = "allowed"
    ALLOWED_WARNING = "allowed_warning"
    REJECTED = "rejected"


@dataclass(frozen=True)
class RateWindow:
    """The last rate-limit state one account reported for one window (§7.4).

    ``scope`` is the model family of a per-model window (``opus``, ``sonnet``) or ``""``;
    ``resets_at`` is unix seconds, or None when the event did not say.
    """

    account: str
    window: str
    status: WindowStatus
    utilization: float = 0.0
    scope: str = ""
    resets_at: float | None = None
    recorded_at: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", WindowStatus(self.status))

    def rejects(self, now: float) -> bool:
        """Whether this window still refuses requests at ``now`` (a rejection without a reset time holds)."""
        return self.status is WindowStatus.REJECTED and (self.resets_at is None or self.resets_at > now)
