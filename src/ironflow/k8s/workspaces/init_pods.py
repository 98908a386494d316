"""A workspace in a pod: the init container, the wrapped command and its report (pure).

:func:`add_git_workspace` turns a rendered pod (an agent step's or an ``exec`` command's)
into one that works on a clone of the workspace's repository, :func:`add_pvc_workspace`
into one that works on a PersistentVolumeClaim in place:

* an init container (the pod's own image, which has git, hardened as the main container)
  clones ``GIT_URL@REF`` into an emptyDir at :data:`~ironflow.workspaces.WORKSPACE_PATH`
  through the auth proxy's secret relay, with the ``ifap_`` token of a grant for the git
  host only (:func:`ironflow.workspaces.git_script.clone_commands`: the token in its environment,
  never in a URL or the clone's ``.git/config``; the host's credential stays in the proxy);
  for a PVC it only reads the claim. Then it records the starting commit and makes the
  *base* (:func:`base_script`): a new git dir holding a copy of the workspace's objects, in
  a second emptyDir the main container mounts read-only;
* the main container runs in the workspace, its command wrapped: once the step's command
  exits, every process it left is killed (the wrapper is the container's PID 1), then
  :func:`report_script` diffs the work tree against the starting commit and prints the
  frame :mod:`ironflow.workspaces.frames` reads back from the pod's log.

The diff never trusts what the step could rig: git runs with an empty environment
(``env -i``), the base's git dir (read-only to the step, its config fresh), an index and
object directory in a fresh temp dir, no system or global config, no hooks, no fsmonitor,
no external diff or textconv, and ``info/attributes`` in the base that unsets ``text``,
``filter``, ``ident`` and ``working-tree-encoding`` for every path, so a ``.gitattributes``
the step wrote cannot change the bytes git records. ``add --force`` takes ignored files too
(a ``.gitignore`` cannot hide a change). The workspace's own ``.git`` lends its objects to
the base, before the step runs, and is never read again.

Never does I/O; a pod it cannot make is a :class:`~ironflow.errors.StepConfigError`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from ironflow import errors, labels
from ironflow.claude import command, layout
from ironflow.k8s import hardening
from ironflow.workspaces import WORKSPACE_PATH, Workspace, git_script

__all__ = [
    "BASE_PATH",
    "CLONE_CONTAINER_NAME",
    "PID1_REAP",
    "POD_PATCH_LIMIT",
    "add_git_workspace",
    "add_pvc_workspace",
    "as_proxy_client",
    "base_script",
    "patch_limit",
    "report_script",
    "wrapped_command",
]

CLONE_CONTAINER_NAME: Final = "ironflow-workspace-clone"
WORKSPACE_VOLUME: Final = "ironflow-workspace"
BASE_VOLUME: Final = "ironflow-workspace-base"
#: A writable /tmp for the report (its ``mktemp -d``), where the pod has none of its own.
REPORT_TMP_VOLUME: Final = "ironflow-workspace-tmp"
#: Where the pristine ``.git`` and the starting commit sit (read-only in the main container).
BASE_PATH: Final = "/ironflow/workspace-base"
#: The largest patch a pod reports: it travels in the pod's log, which the kubelet rotates
#: at ``containerLogMaxSize`` (10 MiB by default); base64 makes it a third longer.
POD_PATCH_LIMIT: Final = 6 * 1024 * 1024
#: Attributes of every path in the diff: no conversion of the bytes the step left.
_ATTRIBUTES: Final = "* -text -filter -ident -working-tree-encoding"
_GIT_OPTIONS: Final = (
    "-c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.untrackedCache=false "
    "-c core.autocrlf=false -c core.symlinks=true -c core.fileMode=true -c core.quotePath=false"
)
_COMMIT: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_DIFF_OPTIONS: Final = "--cached --no-renames --no-ext-diff --no-textconv --no-color --full-index"


def patch_limit(spec: Workspace) -> int:
    """The most patch bytes a pod reports: the workspace's own limit, within the log's."""
    return min(spec.max_total_bytes, POD_PATCH_LIMIT)


def base_script(*, workspace: str = WORKSPACE_PATH, base: str = BASE_PATH) -> str:
    """Before the step: the starting commit and a base git dir of a fresh config holding a copy
    of the workspace's objects, for the report. The workspace's ``.git`` is read with git's
    environment and config emptied (a PVC's may hold what an earlier step rigged); without a
    ``.git`` there is no base (a marker says so) and the report says there is no patch."""
    w, b = command.shell_quote(workspace), command.shell_quote(base)
    return f"""if [ ! -d {w}/.git ]; then : > {b}/no-git; exit 0; fi
ironflow_git() {{
  env -i PATH="$PATH" HOME={b} GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null "$@"
}}
ironflow_format=$(ironflow_git git --git-dir={w}/.git {_GIT_OPTIONS} rev-parse --show-object-format)
ironflow_git git --git-dir={w}/.git {_GIT_OPTIONS} rev-parse --verify 'HEAD^{{commit}}' > {b}/commit
ironflow_git git init --quiet --bare --object-format="$ironflow_format" {b}/git
cp -RL {w}/.git/objects/. {b}/git/objects/
rm -f {b}/git/objects/info/alternates
rm -rf {b}/git/hooks
printf '%s\\n' {command.shell_quote(_ATTRIBUTES)} > {b}/git/info/attributes
"""


def _verified_base(commit: str, base: str) -> str:
    """Shell that checks, before the diff, that the base still holds ``commit`` exactly: a fresh
    git dir (its own config and attributes) borrows the base's objects, and ``fsck --full``
    re-hashes every object reachable from the commit the worker recorded (a base the step could
    write cannot then lie about the starting tree)."""
    if not _COMMIT.fullmatch(commit):
        raise errors.ConfigError("invalid starting commit: expected a full lowercase commit id")
    return f"""  ironflow_base={commit}
  ironflow_gitdir="$ironflow_t/git"
  env -i PATH="$PATH" HOME="$ironflow_t/home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \\
    git init --quiet --bare --object-format={"sha256" if len(commit) == 64 else "sha1"} "$ironflow_gitdir" \\
    && printf '%s\\n' {base}/git/objects > "$ironflow_gitdir/objects/info/alternates" \\
    && printf '%s\\n' {command.shell_quote(_ATTRIBUTES)} > "$ironflow_gitdir/info/attributes" \\
    || {{ ironflow_fail "no git dir for the report"; return; }}
  ironflow_objects="$ironflow_gitdir/objects"
  ironflow_git fsck --full --no-dangling --no-progress "$ironflow_base" >/dev/null 2>"$ironflow_t/err" \\
    || {{ ironflow_fail "the workspace's base no longer holds the starting commit"; return; }}
  ironflow_objects="$ironflow_t/objects"
"""


def report_script(
    *,
    limit: int,
    max_file_bytes: int,
    workspace: str = WORKSPACE_PATH,
    base: str = BASE_PATH,
    commit: str | None = None,
) -> str:
    """Print the workspace's frame: ``git diff --binary`` of the work tree against the
    starting commit, and its ``--raw -z`` listing; or a frame with ``error`` (fixed words
    and numbers only: nothing of the step's is quoted). Its scratch (a ``mktemp -d`` with the
    index and git's new objects) is removed after the frame, given or refused: a warm pod runs
    one report per step, and its /tmp would fill.

    With ``commit`` (the starting commit as the worker recorded it before the step) the base
    need not be out of the step's reach: it is verified first (:func:`_verified_base`) and
    read through a fresh git dir, never through its own config or attributes."""
    w, b = command.shell_quote(workspace), command.shell_quote(base)
    frame = '{"type":"ironflow_workspace","version":1,'
    if commit is None:
        start = f"""  ironflow_gitdir={b}/git
  ironflow_base=$(cat {b}/commit) || {{ ironflow_fail "the starting commit was not recorded"; return; }}
"""
    else:
        start = _verified_base(commit, b)
    return f"""ironflow_fail() {{ printf '\\n{frame}"error":"%s"}}\\n' "$1"; }}
ironflow_git() {{
  env -i PATH="$PATH" HOME="$ironflow_t/home" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null \\
    GIT_NO_REPLACE_OBJECTS=1 GIT_DIR="$ironflow_gitdir" GIT_WORK_TREE={w} GIT_INDEX_FILE="$ironflow_t/index" \\
    GIT_OBJECT_DIRECTORY="$ironflow_objects" GIT_ALTERNATE_OBJECT_DIRECTORIES={b}/git/objects \\
    git {_GIT_OPTIONS} "$@"
}}
ironflow_report() {{
  if [ -e {b}/no-git ]; then printf '\\n{frame}"git":false}}\\n'; return; fi
  ironflow_t=$(mktemp -d) || {{ ironflow_fail "no temporary directory for the report"; return; }}
  ironflow_report_in
  rm -rf "$ironflow_t"
}}
ironflow_report_in() {{
  mkdir "$ironflow_t/objects" || {{ ironflow_fail "no temporary directory for the report"; return; }}
  ironflow_objects="$ironflow_t/objects"
{start}  if [ -n "$(find {w} -path {w}/.git -prune -o ! -type f ! -type d ! -type l -print)" ]; then
    ironflow_fail "the step left a special file (a FIFO, socket or device) in the workspace"; return
  fi
  if [ -n "$(find {w} -path {w}/.git -prune -o -type f -size +{max_file_bytes}c -print)" ]; then
    ironflow_fail "the step left a file over the workspace's max_file_bytes ({max_file_bytes})"; return
  fi
  ironflow_git read-tree "$ironflow_base" 2>"$ironflow_t/err" \\
    && (cd {w} && ironflow_git add --all --force -- .) 2>"$ironflow_t/err" \\
    && ironflow_git diff {_DIFF_OPTIONS} --binary "$ironflow_base" >"$ironflow_t/patch" 2>"$ironflow_t/err" \\
    && ironflow_git diff {_DIFF_OPTIONS} --raw -z --no-abbrev "$ironflow_base" >"$ironflow_t/raw" 2>"$ironflow_t/err" \\
    || {{ ironflow_fail "git could not diff the workspace"; return; }}
  ironflow_size=$(wc -c < "$ironflow_t/patch")
  if [ "$ironflow_size" -gt {limit} ]; then
    ironflow_fail "the patch is $ironflow_size bytes, over the pod's limit of {limit} bytes"; return
  fi
  printf '\\n{frame}"patch_base64":"'
  base64 -w0 < "$ironflow_t/patch"
  printf '","raw_base64":"'
  base64 -w0 < "$ironflow_t/raw"
  printf '"}}\\n'
}}
"""


#: As the container's PID 1: ``kill -KILL -1`` ends every other process of the container at once.
PID1_REAP: Final = 'if [ "$$" = 1 ]; then kill -KILL -1 2>/dev/null; fi\n'


def wrapped_command(
    shell_command: str,
    spec: Workspace,
    *,
    workspace: str = WORKSPACE_PATH,
    base: str = BASE_PATH,
    commit: str | None = None,
    reap: str = PID1_REAP,
) -> str:
    """``shell_command``, then the report; the container exits with the command's own code.

    ``reap`` first kills every process the step left running, so nothing of the step's writes
    after the frame: as the container's PID 1, ``kill -KILL -1`` (:data:`PID1_REAP`; an exec
    into a warm pod passes its own). ``commit`` is :func:`report_script`'s.
    """
    report = report_script(
        limit=patch_limit(spec), max_file_bytes=spec.max_file_bytes, workspace=workspace, base=base, commit=commit
    )
    return f'{report}( {shell_command}\n)\nironflow_code=$?\n{reap}ironflow_report\nexit "$ironflow_code"\n'


def _hardened(main: Mapping[str, Any]) -> dict[str, Any]:
    """The main container's security context, else the sandbox's default posture (non-root,
    read-only root, no capabilities, RuntimeDefault seccomp) with the runner image's uid."""
    given = main.get("securityContext")
    if given:
        return copy.deepcopy(dict(given))
    settings = hardening.SandboxSettings()
    return {**hardening.container_security_context(settings), "runAsUser": settings.run_as_user}


def as_proxy_client(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod``, labelled an agent pod (``component=claude-runner``), in place: the NetworkPolicies
    ironflow renders give DNS and the proxy to agent pods only, and the proxy admits only them.
    A pod that clones or pushes through the proxy (an ``exec`` pod on a git workspace, the push
    pod) is one; as a ``pod-run`` its git could not connect."""
    pod["metadata"].setdefault("labels", {})[labels.LABEL_COMPONENT] = labels.COMPONENT_CLAUDE_RUNNER
    return pod


def add_git_workspace(pod: Mapping[str, Any], spec: Workspace, invocation: git_script.GitInvocation) -> dict[str, Any]:
    """A copy of ``pod`` (its first container is the step's) that works on ``spec``'s clone,
    labelled a client of the proxy (:func:`as_proxy_client`), which the clone goes through.

    ``invocation`` is the clone (:func:`ironflow.workspaces.git_script.clone_commands` into
    :data:`WORKSPACE_PATH`), its environment the init container's only: the step never
    holds the token that reaches the git host.

    Raises:
        StepConfigError: another volume is mounted at or under the workspace.
    """
    clone = git_script.connect_retried(invocation.commands)
    env = {**invocation.env, "HOME": BASE_PATH}
    # The clone, .git included, holds at most what the workspace may: a step cannot fill the node's disk.
    source = {"emptyDir": {"sizeLimit": str(spec.max_total_bytes)}}
    return as_proxy_client(_with_workspace(pod, spec, source, None, f"set -e\n{clone}\n{base_script()}", env))


def add_pvc_workspace(pod: Mapping[str, Any], spec: Workspace) -> dict[str, Any]:
    """A copy of ``pod`` whose step works on the PersistentVolumeClaim ``spec`` names, writable
    at :data:`WORKSPACE_PATH` (its sub path, if given); the init container, which mounts it
    read-only, takes the base from its git repository (none: the report says no patch).

    Raises:
        StepConfigError: another volume is mounted at or under the workspace.
    """
    claim, sub_path = spec.pvc
    source = {"persistentVolumeClaim": {"claimName": claim}}
    return _with_workspace(pod, spec, source, sub_path, f"set -e\n{base_script()}", {"HOME": BASE_PATH})


def _writable_tmp(body: dict[str, Any], main: dict[str, Any]) -> None:
    """A read-only root without its own /tmp (an ``exec`` pod's; an agent pod has one from
    :func:`~ironflow.k8s.hardening.harden_pod_spec`) gets an emptyDir there: the report's
    ``mktemp -d`` needs it, and found none on the real node."""
    read_only = bool((main.get("securityContext") or {}).get("readOnlyRootFilesystem"))
    mounted = {str(m["mountPath"]).rstrip("/") for m in main.get("volumeMounts", [])}
    if not read_only or layout.SANDBOX_TMP in mounted:
        return
    size = hardening.SandboxSettings().tmp_size_limit
    body["volumes"].append({"name": REPORT_TMP_VOLUME, "emptyDir": {"sizeLimit": size}})
    main["volumeMounts"].append({"name": REPORT_TMP_VOLUME, "mountPath": layout.SANDBOX_TMP})


def _with_workspace(
    pod: Mapping[str, Any],
    spec: Workspace,
    source: Mapping[str, Any],
    sub_path: str | None,
    init_script: str,
    init_env: Mapping[str, str],
) -> dict[str, Any]:
    out = copy.deepcopy(dict(pod))
    body: dict[str, Any] = out["spec"]
    main: dict[str, Any] = body["containers"][0]
    for mount in main.get("volumeMounts", []):
        path = str(mount["mountPath"]).rstrip("/") or "/"
        if path in (WORKSPACE_PATH, BASE_PATH) or path.startswith(WORKSPACE_PATH + "/"):
            raise errors.StepConfigError(
                f"a workspace is mounted at {WORKSPACE_PATH}: the volume mount at '{mount['mountPath']}' "
                "is in its way; mount it elsewhere"
            )
    workspace_mount: dict[str, Any] = {"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE_PATH}
    if sub_path is not None:
        workspace_mount["subPath"] = sub_path
    main["command"] = [*main["command"][:-1], wrapped_command(main["command"][-1], spec)]
    main["workingDir"] = WORKSPACE_PATH
    main.setdefault("volumeMounts", []).extend(
        [workspace_mount, {"name": BASE_VOLUME, "mountPath": BASE_PATH, "readOnly": True}]
    )
    base = {"name": BASE_VOLUME, "emptyDir": {"sizeLimit": str(spec.max_total_bytes)}}
    body.setdefault("volumes", []).extend([{"name": WORKSPACE_VOLUME, **copy.deepcopy(dict(source))}, base])
    _writable_tmp(body, main)
    # The clone writes the workspace; a PVC's init container only reads it.
    init_mount = {**workspace_mount, **({"readOnly": True} if "persistentVolumeClaim" in source else {})}
    init: dict[str, Any] = {
        "name": CLONE_CONTAINER_NAME,
        "image": main["image"],
        "command": ["sh", "-c", init_script],
        "env": [{"name": name, "value": value} for name, value in init_env.items()],
        "volumeMounts": [init_mount, {"name": BASE_VOLUME, "mountPath": BASE_PATH}],
        "securityContext": _hardened(main),
    }
    for key in ("imagePullPolicy", "resources"):
        if key in main:
            init[key] = copy.deepcopy(main[key])
    body["initContainers"] = [init, *body.get("initContainers", [])]
    return out
