"""Every public exception of ironflow, sorted by what the caller can do about it.

One root, :class:`IronflowError`, and three branches, one per answer to "what now?":

============================  ==============================================  =========  ========
branch                        the caller should                               retryable  CLI exit
============================  ==============================================  =========  ========
:class:`UsageError`           fix the input: a setting, a file, a credential  never      2
:class:`InfrastructureError`  retry: the API server, runtime or proxy failed  mostly     3
:class:`AgentError`           look at the step: it ran and did not succeed    some       1
============================  ==============================================  =========  ========

Every leaf hangs under exactly one branch, so one ``isinstance`` answers the question,
and each leaf says whether retrying the same step can help (``retryable``), following the
reference's classification: a crashed agent or an unreachable API may succeed next time,
a refused configuration never will.

Invariant: no error's ``str()``, ``repr()`` or ``args`` carries a secret value. Errors
name the variable, the Secret or the key, never the value; texts that come from the
outside (CLI output, API bodies) are truncated before they are stored.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

__all__ = [
    "PARTIAL_OUTPUT_BYTES",
    "TRUNCATE_BYTES",
    "AgentError",
    "AgentTimeout",
    "ApiError",
    "AuthProxyError",
    "BudgetExceeded",
    "CleanupError",
    "CommandTimeout",
    "ConfigError",
    "HttpProviderError",
    "InfrastructureError",
    "IronflowError",
    "KubeClientConfigError",
    "KubeConflict",
    "KubeForbidden",
    "KubeGone",
    "KubeNotFound",
    "KubeUnavailable",
    "KubernetesError",
    "MissingCredential",
    "OperationTimeout",
    "ProcessFailed",
    "PromptTooLarge",
    "RateLimited",
    "ReplayDivergence",
    "RoleBudgetExceeded",
    "RunDeadlineExceeded",
    "RunStateConflict",
    "SandboxError",
    "SandboxFailed",
    "SandboxRefused",
    "SchemaValidation",
    "StepConfigError",
    "ToolProfileUnsupported",
    "UnstorableValue",
    "UsageError",
    "WorkspaceConflict",
    "WorkspaceRefused",
    "WorkspaceUnsafe",
    "truncate",
]

#: Longest text copied from the outside into an error (the reference's 50,000 bytes).
TRUNCATE_BYTES = 50_000
#: Most of each stream a timed-out command's error keeps (its first bytes).
PARTIAL_OUTPUT_BYTES = 1 << 20
#: Longest message of a server's answer (Kubernetes API, auth proxy, HTTP provider) kept in an error.
_SERVER_MESSAGE_BYTES = 2_000


def truncate(text: str, limit: int = TRUNCATE_BYTES) -> str:
    """Cut ``text`` to ``limit`` UTF-8 bytes, on a character boundary, marking the cut."""
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode(errors="ignore") + "...(truncated)"


class IronflowError(Exception):
    """Root of every ironflow error."""

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


# --- the caller's fault: fix the input (exit 2) ---------------------------------------------


class UsageError(IronflowError):
    """The input can never work as given (a setting, a file, a missing credential); never retryable."""


class ConfigError(UsageError, ValueError):
    """A builder was given a value that can never work (the reference panics here).

    Raised at the call that received the value, so the traceback points at the mistake.
    """


class UnstorableValue(UsageError, ValueError):
    """A run input, step result or workflow output is not JSON the store can keep.

    The workflow's code chose the value; the message names it and the types that work.
    """


class StepConfigError(UsageError):
    """The provider refused the step before creating anything.

    The reference reports these as ``ProcessFailed`` with exit code -1 (and so retries
    them); a refused configuration cannot succeed on a retry, so ours is not retryable.
    The message is the reference's, word for word.
    """

    exit_code = -1


class ToolProfileUnsupported(UsageError):
    """This provider cannot apply a tool profile."""


class PromptTooLarge(UsageError):
    """The prompt would not fit the model's context window."""

    def __init__(self, chars: int, estimated_tokens: int, model_limit: int) -> None:
        self.chars = chars
        self.estimated_tokens = estimated_tokens
        self.model_limit = model_limit
        super().__init__(
            f"prompt too large: {chars} chars (~{estimated_tokens} tokens) exceeds model limit of {model_limit} tokens"
        )


class WorkspaceRefused(UsageError):
    """A workspace's source cannot be taken in: not a directory, a special file, a file or a
    tree over its size limit."""


class MissingCredential(UsageError):
    """No Claude credential (or auth-proxy admin key) is configured; the message names the variables."""


class SandboxRefused(UsageError):
    """The cluster will not start the step's pod or sandbox as configured: a missing Secret or
    key, an invalid image name, an image that cannot be pulled. Never retryable.

    Raised as soon as the cluster says so, not after the step's timeout; ``subject`` names
    the object (``pod ironflow-ab12cd``), ``reason`` is the cluster's (``CreateContainerConfigError``)
    and the message carries the cluster's words, never a Secret's value.
    """

    def __init__(self, subject: str, reason: str, detail: str, *, events: str = "") -> None:
        self.subject, self.reason, self.detail = subject, reason, detail
        super().__init__(_sandbox_message(subject, "cannot start", reason, detail, False, events))


class NamespaceNotFound(UsageError):
    """The namespace a command was pointed at does not exist (a list there answers empty, as if
    all were well, so the command says so instead)."""


class KubeClientConfigError(UsageError):
    """No usable cluster configuration (missing kubeconfig, unknown context, no service account).

    The same configuration fails the same way; the message names the source.
    """


class ReplayDivergence(UsageError):
    """A resumed run asked for a different step than the stored one at the same position.

    The workflow code changed under a run (or is not deterministic); replaying would mix
    two histories, so the run fails. Fix: finish old runs before changing a workflow, or
    start a new run.
    """

    def __init__(self, position: int, stored: str, requested: str) -> None:
        self.position = position
        self.stored = stored
        self.requested = requested
        super().__init__(
            f"replay diverged at step {position}: the run recorded {stored} but the workflow now asks for "
            f"{requested}; start a new run or restore the workflow code of this run"
        )


class RunStateConflict(UsageError):
    """A change the run's state refuses: cancelling a finished run, retrying one that did not fail,
    changing a sub-workflow's run instead of its root. The message names the state and what to do."""


# --- the step itself failed: look at it (exit 1) --------------------------------------------


class AgentError(IronflowError):
    """The step ran and did not produce a result; ``retryable`` says if running it again may."""


class ProcessFailed(AgentError):
    """The agent process (or its pod) ended without a usable result."""

    retryable = True

    def __init__(self, exit_code: int, stderr: str) -> None:
        self.exit_code = exit_code
        self.stderr = truncate(stderr)
        super().__init__(f"claude process exited with code {exit_code}: {self.stderr}")


class WorkspaceUnsafe(AgentError):
    """The step left in its workspace what a workspace may not hold (a special file, a file
    over the size limit): no patch is made of it."""


class WorkspaceConflict(AgentError):
    """A workspace's changes cannot be made or applied: ``paths`` changed on the host while the
    step ran, or would be written through a symlink or outside the tree. Nothing was written."""

    def __init__(self, message: str, paths: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.paths = tuple(paths)


class AgentTimeout(AgentError):
    """The step ran past its timeout and was stopped."""

    retryable = True

    def __init__(self, limit_s: float, *, bound: str | None = None) -> None:
        self.limit_s = limit_s
        #: Whose bound fired, ``"step"`` (``AgentConfig.timeout``) or ``"provider"``; None: not said.
        self.bound = bound
        whose = "" if bound is None else f" (the {bound}'s timeout)"
        super().__init__(f"agent timed out after {limit_s:g}s{whose}")


class CommandTimeout(AgentTimeout):
    """A plain command ran past its timeout and was killed, with what it wrote until then.

    As :class:`subprocess.TimeoutExpired`: ``output`` (alias ``stdout``) and ``stderr`` are
    bytes, at most :data:`PARTIAL_OUTPUT_BYTES` each (the message says when one was cut).
    An ``AgentTimeout``, so callers that catch that keep working.
    """

    def __init__(self, limit_s: float, *, output: bytes = b"", stderr: bytes = b"") -> None:
        self.limit_s = limit_s
        self.bound: str | None = None
        self.output = output[:PARTIAL_OUTPUT_BYTES]
        self.stderr = stderr[:PARTIAL_OUTPUT_BYTES]
        cut = len(output) > PARTIAL_OUTPUT_BYTES or len(stderr) > PARTIAL_OUTPUT_BYTES
        note = f" (output kept up to {PARTIAL_OUTPUT_BYTES} bytes per stream)" if cut else ""
        AgentError.__init__(self, f"command timed out after {limit_s:g}s{note}")

    @property
    def stdout(self) -> bytes:
        """``output``, under the name :class:`subprocess.TimeoutExpired` also gives it."""
        return self.output


class SchemaValidation(AgentError):
    """The CLI output could not be read, or held no value matching the JSON schema."""

    retryable = True

    def __init__(
        self,
        expected: str,
        got: str,
        *,
        raw_response: str = "",
        partial: Any = None,
        debug_messages: Any = None,
    ) -> None:
        self.expected = expected
        self.got = got
        self.raw_response = truncate(raw_response, 4000)
        self.partial = partial
        self.debug_messages = debug_messages
        super().__init__(f"schema validation failed: expected {expected}, got {got}")


class RateLimited(AgentError):
    """The account is in a rejected rate-limit window; ``retry_after_s``, when known, is how long
    until the earliest window resets (a Temporal workflow waits that long on a timer)."""

    retryable = True

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class HttpProviderError(AgentError):
    """An HTTP-level failure talking to the model; status 0 means no response."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.retryable = status == 0 or status >= 500
        super().__init__(f"HTTP provider error {status}: {truncate(message, _SERVER_MESSAGE_BYTES)}")


class ApiError(AgentError):
    """The model API answered with an error (reported by the CLI as ``is_error``)."""

    def __init__(self, status: int | None, code: str | None, message: str) -> None:
        self.status = status
        self.code = code
        self.retryable = status is None or status == 429 or status >= 500
        self.detail = truncate(message) if message else "(no message from the claude CLI)"
        label = f"API error {status}" if status is not None else "API error"
        super().__init__(f"{label}: {self.detail}")


class BudgetExceeded(AgentError):
    """The step spent its ``max_budget_usd``."""

    def __init__(self, spent_usd: float, limit_usd: float, *, debug_messages: Any = None) -> None:
        self.spent_usd = spent_usd
        self.limit_usd = limit_usd
        self.debug_messages = debug_messages
        super().__init__(f"budget exceeded: spent ${spent_usd:g} of ${limit_usd:g}")


class RoleBudgetExceeded(BudgetExceeded):
    """The step's role has spent its cap for this calendar period; no step of it starts until the next."""

    def __init__(self, role: str, spent_usd: float, limit_usd: float, *, period: str, since: float) -> None:
        self.role = role
        self.spent_usd = spent_usd
        self.limit_usd = limit_usd
        self.debug_messages = None
        began = time.strftime("%Y-%m-%d", time.gmtime(since))
        IronflowError.__init__(
            self,
            f"role '{role}' has spent ${spent_usd:g} of its ${limit_usd:g} cap this {period} (since {began} UTC)",
        )


# --- infrastructure: retry (exit 3) ---------------------------------------------------------


class InfrastructureError(IronflowError):
    """Something around the step failed (API server, sandbox runtime); a retry may help."""

    retryable = True


class KubernetesError(InfrastructureError):
    """The Kubernetes API refused or failed a call. ``status`` 0 means no answer."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        self.retryable = status == 0 or status == 409 or status == 429 or status >= 500
        super().__init__(truncate(message, _SERVER_MESSAGE_BYTES))


class KubeForbidden(KubernetesError):
    """403: the worker's Role lacks this verb on this resource."""


class KubeNotFound(KubernetesError):
    """404: the object (or the resource type) does not exist."""


class KubeConflict(KubernetesError):
    """409: the object already exists, or changed under us."""


class KubeGone(KubernetesError):
    """410: a watch's resourceVersion is too old; list again."""


class KubeUnavailable(KubernetesError):
    """5xx, or no answer at all (``status`` 0): the API server may come back."""


class CleanupError(InfrastructureError):
    """Objects of a run or a previous attempt could not be removed.

    Replayable: the engine puts the run back in the queue and the next attempt
    releases again.
    """


class SandboxError(InfrastructureError):
    """A sandbox could not be started or reached: the local runtime (bubblewrap, gVisor) could
    not start the step, or a sandbox session's runtime (any backend) did not answer as it must."""


class SandboxFailed(InfrastructureError):
    """The cluster could not start or keep the step's pod or sandbox: unschedulable, evicted,
    OOM-killed, past its deadline, a container runtime error. Retryable.

    As :class:`SandboxRefused`: raised at once, ``subject``, ``reason`` and the cluster's words.
    """

    def __init__(self, subject: str, reason: str, detail: str, *, started: bool = False, events: str = "") -> None:
        self.subject, self.reason, self.detail, self.started = subject, reason, detail, started
        verb = "failed" if started else "cannot start"
        super().__init__(_sandbox_message(subject, verb, reason, detail, True, events))


def _sandbox_message(subject: str, verb: str, reason: str, detail: str, retryable: bool, events: str) -> str:
    said = truncate(detail, _SERVER_MESSAGE_BYTES) if detail else "(no message)"
    text = f"{subject} {verb}: {reason}: {said} ({'retryable' if retryable else 'not retryable'})"
    return f"{text}\nrecent events:\n{truncate(events, _SERVER_MESSAGE_BYTES)}" if events else text


class AuthProxyError(InfrastructureError):
    """Talking to the auth proxy failed; the message never holds a token or a key.

    ``retryable`` follows the proxy's answer (no answer, 429, 5xx: yes); a missing
    credential is :class:`MissingCredential`, not this.
    """

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(truncate(message, _SERVER_MESSAGE_BYTES))


class RunDeadlineExceeded(AgentError):
    """The whole run passed its absolute deadline (reference engine 4.0): its in-flight steps were
    stopped and nothing more runs. Never retried: the deadline does not move."""

    def __init__(self, deadline_at: float, *, while_running: bool) -> None:
        self.deadline_at = deadline_at
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline_at))
        when = "while it ran" if while_running else "before it could resume"
        super().__init__(f"the run passed its deadline ({at}) {when}")


class OperationTimeout(InfrastructureError):
    """A ``PodRun`` / ``JobRun`` did not finish within its timeout; the object was deleted.

    The message names the pod or Job (``pod 'check' did not finish within 300s``).
    """
