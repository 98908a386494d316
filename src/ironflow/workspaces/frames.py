"""The workspace report a pod writes as its last log line, and its reading (pure).

A pod step has no disk the worker can read: when the step's command exits, a script of
ironflow's in the same container (:mod:`ironflow.k8s.workspaces.init_pods`) computes the change
set and prints it as one JSON line, the *frame*, after everything the step printed:

``{"type": "ironflow_workspace", "version": 1, "patch_base64": …, "raw_base64": …}``

``patch_base64`` is ``git diff --binary`` against the starting commit, ``raw_base64`` the
same diff's ``--raw -z`` listing (one record per changed path, NUL-separated, so any byte
of a path survives). A frame with ``"error"`` says the report could not be made; one with
``"git": false`` that the workspace (a PVC) holds no git repository to diff against.

Invariants of :func:`split_frame`:

* only the very last line counts: a frame the step printed earlier (a forgery) is the
  step's own output, never the report;
* no frame, a frame cut short (the pod stopped mid-line) or one that does not parse is an
  error, never an empty patch: "no change" is only ever said by a whole frame;
* the step's output comes back exactly as printed (the newline the script adds before the
  frame is taken off again).

Never does I/O; refusals are :class:`~ironflow.errors.WorkspaceUnsafe` whose messages
quote at most a short, cut piece of what the pod said.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Final

from ironflow import errors
from ironflow.workspaces import Change, ChangedFile, WorkspaceChanges, is_git_internal

__all__ = ["FRAME_PREFIX", "FRAME_TYPE", "parse_raw", "split_frame"]

FRAME_TYPE: Final = "ironflow_workspace"
FRAME_VERSION: Final = 1
#: How every frame line starts (the script prints the keys in this order).
FRAME_PREFIX: Final = '{"type":"' + FRAME_TYPE + '"'
_GITLINK: Final = "160000"
_NO_FRAME: Final = (
    "the pod's workspace report is missing: its log does not end with the report line "
    "(the pod was stopped, or something of the step's printed after it)"
)


def _refused(message: str) -> errors.WorkspaceUnsafe:
    return errors.WorkspaceUnsafe(message)


def _decode(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise _refused(f"the pod's workspace report has no {what}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _refused(f"the pod's workspace report has a {what} that is not base64") from None


def parse_raw(raw: bytes) -> tuple[ChangedFile, ...]:
    """The changed paths of ``git diff --raw -z --no-renames``, sorted as git sorts them.

    >>> z = b":100644 100755 " + b"a" * 40 + b" " + b"a" * 40 + b" M\\x00run.sh\\x00"
    >>> [(f.path, f.change.value) for f in parse_raw(z)]
    [('run.sh', 'mode')]

    Raises:
        WorkspaceUnsafe: a record that is not git's, or a nested repository (a gitlink),
            which a patch cannot carry.
    """
    fields = raw.split(b"\x00")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) % 2:
        raise _refused("the pod's workspace report lists a change without its path")
    out: list[ChangedFile] = []
    for head, name in zip(fields[0::2], fields[1::2], strict=True):
        parts = head.decode("ascii", errors="replace").split(" ")
        if len(parts) != 5 or not parts[0].startswith(":"):
            raise _refused("the pod's workspace report lists a change git did not write")
        old_mode, new_mode, old_id, new_id, status = parts[0][1:], parts[1], parts[2], parts[3], parts[4]
        path = name.decode(errors="surrogateescape")
        if is_git_internal(path):
            continue  # git never lists these; a report that does is not believed for them
        if _GITLINK in (old_mode, new_mode):
            raise _refused(
                f"the step made a nested git repository at '{errors.truncate(path, 200)}': "
                "a patch cannot carry it; remove its .git directory"
            )
        if status == "A":
            change = Change.ADDED
        elif status == "D":
            change = Change.DELETED
        elif status in ("M", "T"):
            same = old_id == new_id and status == "M"
            change = Change.MODE if same and old_mode != new_mode else Change.MODIFIED
        else:
            raise _refused(f"the pod's workspace report has an unknown change kind '{errors.truncate(status, 8)}'")
        out.append(ChangedFile(path, change, None, None))
    return tuple(out)


def split_frame(logs: str) -> tuple[str, WorkspaceChanges | None]:
    """The step's own output, and the changes the frame that ends ``logs`` reports (None: the
    workspace holds no git repository, so there is nothing to diff against: ``"git": false``).

    Raises:
        WorkspaceUnsafe: no frame at the end, a cut or malformed one, or the pod's own
            refusal (e.g. a patch over the workspace's size limit).
    """
    body = logs[:-1] if logs.endswith("\n") else logs
    start = body.rfind("\n") + 1
    line = body[start:]
    if not line.startswith(FRAME_PREFIX):
        raise _refused(_NO_FRAME)
    try:  # a frame cut anywhere before its closing brace is not JSON (a followed log drops the last newline)
        frame = json.loads(line)
    except ValueError:
        raise _refused("the pod's workspace report was cut short or is not JSON") from None
    if not isinstance(frame, dict) or frame.get("type") != FRAME_TYPE or frame.get("version") != FRAME_VERSION:
        raise _refused("the pod's workspace report is of an unknown version: use the same ironflow on both sides")
    said = body[: max(start - 1, 0)]  # the newline the script printed before the frame is its own
    problem = frame.get("error")
    if problem is not None:
        raise _refused(f"the pod could not report its workspace: {errors.truncate(str(problem), 300)}")
    if frame.get("git") is False:
        return said, None
    patch = _decode(frame.get("patch_base64"), "patch")
    files = parse_raw(_decode(frame.get("raw_base64"), "change list"))
    if bool(patch) != bool(files):
        raise _refused("the pod's workspace report has a patch and a change list that disagree")
    return said, WorkspaceChanges(patch, files)
