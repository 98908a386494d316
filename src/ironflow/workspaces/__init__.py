"""Workspaces: the repository a step works in and the change set it hands back (pure values).

:mod:`.spec` holds what a step asks for (:class:`Workspace`) and what comes back
(:class:`WorkspaceChanges`); :mod:`.git_script` the git commands a sandbox runs to clone and
push; :mod:`.frames` the report a pod writes as its last log line. The I/O is each backend's
(``ironflow.local.workspaces``, ``ironflow.k8s.workspaces``).
"""

from ironflow.workspaces.spec import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_TOTAL_BYTES,
    PVC_PREFIX,
    WORKSPACE_PATH,
    Change,
    ChangedFile,
    Entry,
    Kind,
    Snapshot,
    Workspace,
    WorkspaceChanges,
    candidates,
    confirm,
    escapes,
    git_mode,
    is_git_internal,
    is_git_source,
    is_pvc_source,
    push_message,
)

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "PVC_PREFIX",
    "WORKSPACE_PATH",
    "Change",
    "ChangedFile",
    "Entry",
    "Kind",
    "Snapshot",
    "Workspace",
    "WorkspaceChanges",
    "candidates",
    "confirm",
    "escapes",
    "git_mode",
    "is_git_internal",
    "is_git_source",
    "is_pvc_source",
    "push_message",
]
