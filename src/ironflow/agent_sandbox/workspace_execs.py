"""A git workspace in a warm agent-sandbox pod: the clone exec, the step's wrapped exec (pure).

The warm pod exists before the step, so nothing of a step can be an init container or a
read-only volume, and the step's exec is not the container's PID 1. What stands in for them:

* **the clone** is an exec of its own, before the step: it reads the ``ifap_`` token of a
  grant for the git host only from stdin into its own environment
  (:func:`ironflow.workspaces.git_script.clone_commands`: never a URL, an argv or ``.git/config``),
  clones into :data:`WORKSPACE`, makes the base with the pod backend's
  :func:`~ironflow.k8s.workspaces.init_pods.base_script` and prints the starting commit, which the
  worker keeps. The worker revokes the grant as soon as this exec ends;
* **the base** sits in HOME, where the step (the same uid) could write it, so the report does
  not trust it: it reads it through a fresh git dir and re-hashes every object reachable from
  the commit the worker recorded (``commit=`` of
  :func:`~ironflow.k8s.workspaces.init_pods.report_script`) before the diff;
* **the end of the step**: once the step's command exits, :data:`REAP` stops every process of
  the container but PID 1 (the idle loop), this exec's shell and its ancestors, pass after pass
  until a pass finds none running, then kills them all (a stopped process can neither fork nor
  wake another, and a parent is never let run on by its child's death). It runs only when
  PID 1 is the warm pod's idle loop (a claim's pod is single-use: nothing else of ours runs in
  it); anywhere else the report refuses, since what the step left running could still write.

Then the same frame as a pod's (:mod:`ironflow.workspaces.frames`), printed last on the exec's
stdout.

* **the push** (``push_branch``, after a step that succeeded) is an exec of its own in the same
  pod, once the step's processes are ended and its token revoked. It trusts nothing the step
  left: the patch is the verified report's, written in by an exec before it
  (:data:`PUSH_PATCH`); it clones the ref afresh beside the step's workspace, with a grant of
  its own read from stdin as the clone's is, and commits and pushes as a push pod does
  (:func:`ironflow.workspaces.git_script.push_script`).

Never does I/O.
"""

from __future__ import annotations

import shlex
from typing import Final

from ironflow import errors
from ironflow.agent_sandbox import patterns
from ironflow.claude import command, layout
from ironflow.k8s.workspaces import clone_exec as workspace_clone
from ironflow.k8s.workspaces import init_pods
from ironflow.workspaces import Workspace, git_script

__all__ = [
    "BASE",
    "PUSH_CLONE",
    "PUSH_PATCH",
    "PUSH_PATCH_FILE",
    "REAP",
    "WORKSPACE",
    "clone_exec",
    "parse_commit",
    "push_exec",
    "step_command",
]

#: The step's working directory: the warm pod's root is read-only, HOME is its emptyDir.
_PATHS: Final = workspace_clone.paths(layout.SANDBOX_HOME)
WORKSPACE: Final = _PATHS.workspace
BASE: Final = _PATHS.base
#: The push's fresh clone, and the patch it commits (written by an exec of its own before it).
PUSH_CLONE: Final = f"{layout.SANDBOX_HOME}/.ironflow/workspace-push"
PUSH_PATCH_FILE: Final = "workspace-push.patch"
PUSH_PATCH: Final = f"{layout.SANDBOX_HOME}/.ironflow/{PUSH_PATCH_FILE}"
_TOKEN_MARK: Final = workspace_clone.TOKEN_MARK
#: Ends what the step left: stops every pid but 1, this shell and its ancestors until a pass
#: finds none running, then kills them all. Only in a warm pod (PID 1 is the idle loop);
#: elsewhere the report refuses.
REAP: Final = f"""ironflow_idle=$(tr '\\0' ' ' < /proc/1/cmdline 2>/dev/null)
if [ "$ironflow_idle" != {command.shell_quote(f"sh -c {patterns.IDLE_COMMAND} ")} ]; then
  ironflow_report() {{ ironflow_fail "the step's processes could not be ended: PID 1 is not the warm pod's"; }}
else
  ironflow_keep=" 1 $$ "
  ironflow_p=$$
  while [ "$ironflow_p" -gt 1 ]; do
    ironflow_p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$ironflow_p/status 2>/dev/null || echo 0)
    ironflow_keep="$ironflow_keep$ironflow_p "
  done
  # Stop first, kill after: a parent killed after its child would run on (its wait returns).
  ironflow_pass=0
  ironflow_left=1
  while [ "$ironflow_left" != 0 ] && [ "$ironflow_pass" -lt 100 ]; do
    ironflow_pass=$((ironflow_pass + 1))
    ironflow_left=0
    for ironflow_d in /proc/[0-9]*; do
      ironflow_pid=${{ironflow_d#/proc/}}
      case "$ironflow_keep" in *" $ironflow_pid "*) continue ;; esac
      ironflow_state=$(sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' "$ironflow_d/status" 2>/dev/null)
      case "$ironflow_state" in ''|Z|X|T) continue ;; esac  # gone, dead, or already stopped
      kill -STOP "$ironflow_pid" 2>/dev/null && ironflow_left=1
    done
  done
  for ironflow_d in /proc/[0-9]*; do  # every one is stopped now: none can fork or wake another
    ironflow_pid=${{ironflow_d#/proc/}}
    case "$ironflow_keep" in *" $ironflow_pid "*) continue ;; esac
    kill -KILL "$ironflow_pid" 2>/dev/null
  done
  if [ "$ironflow_left" != 0 ]; then
    ironflow_report() {{ ironflow_fail "the step's processes could not be ended"; }}
  fi
fi
"""


def clone_exec(proxy_url: str, spec: Workspace, token_bytes: int) -> tuple[str, ...]:
    """The clone's argv into :data:`WORKSPACE` (:func:`ironflow.k8s.workspaces.clone_exec.clone_exec`).

    Raises:
        ConfigError: a source, ref or proxy URL the relay cannot take.
    """
    return workspace_clone.clone_exec(proxy_url, spec, token_bytes, _PATHS)


def push_exec(proxy_url: str, spec: Workspace, token_bytes: int, *, message: str) -> tuple[str, ...]:
    """The push's argv, after the step: read ``token_bytes`` of stdin (the push's own grant) into
    its environment only, clone ``spec``'s ref afresh into :data:`PUSH_CLONE` (the step's ``.git``
    was the step's to rig), commit :data:`PUSH_PATCH` onto it and push it to ``spec.push_branch``
    (:func:`ironflow.workspaces.git_script.push_script`); the clone and the patch are removed on every path.

    Raises:
        ConfigError: no branch to push to, or a source, ref or proxy URL the relay cannot take.
    """
    if spec.push_branch is None:
        raise errors.ConfigError("a push needs the workspace's push_branch")
    clone = git_script.clone_commands(proxy_url, spec.source, _TOKEN_MARK, directory=PUSH_CLONE, ref=spec.ref)
    push = git_script.push_commands(proxy_url, spec.source, _TOKEN_MARK, directory=PUSH_CLONE, branch=spec.push_branch)
    git = git_script.push_script(clone, push, directory=PUSH_CLONE, patch_file=PUSH_PATCH)
    left = command.shell_quote(shlex.join(("rm", "-rf", PUSH_CLONE, PUSH_PATCH)))
    script = (
        "set -e\n"
        + workspace_clone.token_exports({**clone.env, **git_script.COMMITTER}, token_bytes)
        # The message is the prompt's: never rendered with the token's mark.
        + f"\nexport {git_script.PUSH_MESSAGE_ENV}={command.shell_quote(message)}"
        + f"\ntrap {left} EXIT\n"  # the patch is the push's: gone after it, whatever happened
        f"rm -rf {command.shell_quote(PUSH_CLONE)}\n"
        f"( {git}) >&2\n"
    )
    return ("sh", "-c", script)


#: The starting commit the clone exec printed last (raises WorkspaceUnsafe when none).
parse_commit = workspace_clone.parse_commit


def step_command(shell_command: str, spec: Workspace, commit: str) -> str:
    """The step's shell, in the workspace, wrapped as a pod's is: run, reap (:data:`REAP`), report."""
    inner = f"cd {command.shell_quote(WORKSPACE)} && {shell_command}"
    return init_pods.wrapped_command(inner, spec, workspace=WORKSPACE, base=BASE, commit=commit, reap=REAP)
