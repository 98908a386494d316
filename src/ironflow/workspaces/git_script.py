"""The git commands a sandbox runs to clone a workspace and push its result, through the
auth proxy's secret relay (pure).

A sandbox never reaches a git host itself and never holds the host's credential: it talks to
``<proxy>/r/<host>/<path>`` with its opaque ``ifap_`` token, and the proxy injects the real
credential. This module renders what the sandbox runs for that, as values: the relay URL, and
for :func:`clone_commands` and :func:`push_commands` the argv lists and one environment.

Invariants of every rendered invocation:

* the token travels in the environment only, as ``http.<relay URL>.extraHeader`` through
  ``GIT_CONFIG_COUNT``: never in argv, a URL or the clone's ``.git/config``, and git sends it
  to the relay URL only;
* git never prompts and asks no credential helper (``GIT_TERMINAL_PROMPT=0``, an empty
  ``GIT_ASKPASS``, ``credential.helper`` reset); system and global config are not read;
* the proxy's scheme is the only transport (``GIT_ALLOW_PROTOCOL``: no ``file://``, ``ext::``
  or ssh, for a submodule either) and redirects are not followed.

The environment is meant to be merged over a base that sets no other ``GIT_*`` variable
(an inherited ``GIT_DIR`` or ``GIT_CONFIG_PARAMETERS`` would change what runs).

Never does I/O; refusals are :class:`~ironflow.errors.ConfigError` (a ``ValueError``) whose
messages never repeat the URL or the token.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from ironflow import errors

__all__ = [
    "COMMITTER",
    "PUSH_MESSAGE_ENV",
    "GitInvocation",
    "check_ref",
    "clone_commands",
    "connect_retried",
    "parse_git_source",
    "push_commands",
    "push_failure",
    "push_script",
    "relay_url",
]

_MAX_SOURCE: Final = 2048
#: A DNS label as the proxy's host allowlist reads it (``tokens.validate_host_pattern``).
_HOST_LABEL: Final = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
#: Path characters the secret relay passes (its row S3, without ``@``, which starts a ref here).
_PATH: Final = re.compile(r"(/[A-Za-z0-9._~+-]+)+/?")
#: A branch or tag name: a safe subset of ``git check-ref-format`` (no option, no revision syntax).
_REF: Final = re.compile(r"[A-Za-z0-9_+@][A-Za-z0-9._/+@-]{0,254}")
#: A full commit id, lowercase as git prints it (SHA-1 or SHA-256): fetched by id, as ``clone --branch`` takes names.
_COMMIT: Final = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_TOKEN: Final = re.compile(r"[!-~]+")
#: The proxy as a sandbox sees it: a host name, an IPv4 or [IPv6] address, a port.
_PROXY_AUTHORITY: Final = re.compile(r"[A-Za-z0-9.:\[\]-]+")
#: Tries of a git command that could not connect to the proxy, one second apart: a new pod's first
#: connections may be refused while the network plugin programs its NetworkPolicies (kube-router
#: does; Kubernetes asks pods to be resilient to it).
CONNECT_TRIES: Final = 10
#: What git (libcurl) says when no connection was made at all, so retrying cannot repeat a request.
_NOT_CONNECTED: Final = ("Failed to connect to", "Could not resolve host", "Couldn't connect to server")
#: Who a pushed commit says made it.
COMMITTER: Final[Mapping[str, str]] = MappingProxyType(
    {
        "GIT_AUTHOR_NAME": "ironflow",
        "GIT_AUTHOR_EMAIL": "ironflow@localhost",
        "GIT_COMMITTER_NAME": "ironflow",
        "GIT_COMMITTER_EMAIL": "ironflow@localhost",
    }
)
#: The variable :func:`push_script` reads the commit message from (never shell-quoted into the script).
PUSH_MESSAGE_ENV: Final = "IRONFLOW_PUSH_MESSAGE"
_USAGE: Final = "expected a git URL like https://github.com/org/repo.git, optionally @<branch, tag or commit>"


@dataclass(frozen=True)
class GitInvocation:
    """Commands a sandbox runs one after another, each with ``env`` (which holds the token: not in ``repr``)."""

    url: str
    commands: tuple[tuple[str, ...], ...]
    env: Mapping[str, str] = field(repr=False)


def _refuse(problem: str) -> errors.ConfigError:
    return errors.ConfigError(f"invalid git source: {problem}; {_USAGE}")


def check_ref(ref: str, what: str) -> str:
    """``ref`` when git reads it as a plain name: never an option, a revision expression or a path trick."""
    segments = ref.split("/")
    if (
        not _REF.fullmatch(ref)
        or ref == "@"
        or ".." in ref
        or "@{" in ref
        or ref.endswith((".", "/", ".lock"))
        or any(not s or s.startswith(".") or s.endswith(".lock") for s in segments)
    ):
        raise errors.ConfigError(
            f"invalid {what}: expected a branch, tag or commit name of letters, digits and ._/+@- "
            "(not starting with '-' or '.', no '..', no '.lock' ending)"
        )
    return ref


def _split_url(text: str) -> tuple[str, str, str, str | None]:
    """``scheme, host, path, ref`` of a checked source (host lowercased, one trailing ``/`` dropped)."""
    if len(text) > _MAX_SOURCE or not text.isascii() or not text.isprintable() or " " in text:
        raise _refuse("only printable ASCII without spaces, up to 2048 characters")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in ("https", "http"):
        raise _refuse("only https:// and http:// URLs are cloned (no file://, ext::, ssh or scp-like host:path)")
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        raise _refuse("no user name or password in the URL: the proxy injects the credential")
    if ":" in authority or "[" in authority:
        raise _refuse("no port and no IP literal: the relay reaches a host by name on its default port")
    host = authority.lower()
    labels = host.split(".")
    if len(labels) < 2 or labels[-1].isdigit() or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise _refuse("the host must be a DNS name like git.example.com")
    path, at, ref = ("/" + tail).partition("@")
    if not slash or not _PATH.fullmatch(path) or any(s in (".", "..") for s in path.split("/")):
        raise _refuse("the path must name a repository, without '..', '//', '?', '#' or percent-encoding")
    return scheme.lower(), host, path.rstrip("/"), check_ref(ref, "git source ref") if at else None


def parse_git_source(text: str) -> tuple[str, str | None]:
    """``https://host/org/repo.git@ref`` into ``(url, ref)`` (``ref`` is ``None`` when not given).

    >>> parse_git_source("https://GitHub.com/org/repo.git@v1.2")
    ('https://github.com/org/repo.git', 'v1.2')
    """
    scheme, host, path, ref = _split_url(text)
    return f"{scheme}://{host}{path}", ref


def _checked_proxy(proxy_url: str) -> tuple[str, str]:
    """The proxy's base URL without a trailing ``/``, and its scheme."""
    scheme, sep, rest = proxy_url.partition("://")
    authority = rest.rstrip("/")
    if scheme not in ("http", "https") or not sep or not _PROXY_AUTHORITY.fullmatch(authority):
        raise errors.ConfigError("invalid proxy address: expected http(s)://<host>[:<port>] as the sandbox sees it")
    return f"{scheme}://{authority}", scheme


def relay_url(proxy_url: str, git_url: str) -> str:
    """Where a sandbox reaches ``git_url``: ``<proxy>/r/<host>/<path>``.

    >>> relay_url("http://127.0.0.1:8080", "https://github.com/org/repo.git")
    'http://127.0.0.1:8080/r/github.com/org/repo.git'
    """
    base, _ = _checked_proxy(proxy_url)
    _, host, path, ref = _split_url(git_url)
    if ref is not None:
        raise _refuse("give the ref on its own, not as @<ref> in the URL")
    return f"{base}/r/{host}{path}"


def _environment(proxy_url: str, url: str, token: str) -> Mapping[str, str]:
    _, scheme = _checked_proxy(proxy_url)
    if not _TOKEN.fullmatch(token):
        raise errors.ConfigError("invalid proxy token: expected printable ASCII without spaces")
    config = [
        (f"http.{url}.extraHeader", f"Authorization: Bearer {token}"),
        ("credential.helper", ""),  # an empty value drops every helper configured before it
        ("http.followRedirects", "false"),
    ]
    env = {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",  # set but empty: git then asks neither core.askPass nor SSH_ASKPASS
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_ALLOW_PROTOCOL": scheme,  # wins over every protocol.* setting, a clone's own included
        "GIT_CONFIG_COUNT": str(len(config)),
    }
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return MappingProxyType(env)


def _check_directory(directory: str) -> str:
    if not directory or not directory.isprintable():
        raise errors.ConfigError("invalid clone directory: expected a printable, non-empty path")
    return directory


def clone_commands(
    proxy_url: str, git_url: str, token: str, *, directory: str, ref: str | None = None, depth: int | None = None
) -> GitInvocation:
    """Clone ``git_url`` at ``ref`` (a branch or tag, a full commit id, or ``None`` for the default branch).

    A name is one ``git clone --branch``. A commit id is ``init``, ``fetch <id>`` and a detached
    ``checkout``, since a clone takes names only; git's protocol v2 (on GitHub and GitLab) lets
    a client fetch any reachable commit by id. ``depth`` makes the history shallow.
    """
    url = relay_url(proxy_url, git_url)
    env = _environment(proxy_url, url, token)
    place = _check_directory(directory)
    if depth is not None and depth < 1:
        raise errors.ConfigError(f"invalid clone depth {depth}: expected at least 1")
    shallow = ("--depth", str(depth)) if depth is not None else ()
    if ref is not None and _COMMIT.fullmatch(ref):
        commands: tuple[tuple[str, ...], ...] = (
            ("git", "init", "--quiet", "--", place),
            ("git", "-C", place, "remote", "add", "origin", url),
            ("git", "-C", place, "fetch", "--quiet", *shallow, "origin", ref),
            ("git", "-C", place, "checkout", "--quiet", "--detach", "FETCH_HEAD"),
        )
    else:
        branch = () if ref is None else ("--branch", check_ref(ref, "ref"))
        commands = (("git", "clone", "--quiet", *shallow, *branch, "--", url, place),)
    return GitInvocation(url, commands, env)


def _own_clone(directory: str) -> tuple[str, str]:
    """git trusts the clone just made in ``directory`` though another user owns the directory
    itself (a Kubernetes emptyDir is root's): else it calls it dubious and finds no repository."""
    return ("-c", f"safe.directory={directory}")


def push_commands(proxy_url: str, git_url: str, token: str, *, directory: str, branch: str) -> GitInvocation:
    """Push the clone's ``HEAD`` in ``directory`` to ``branch``, which must not exist yet.

    The push goes to the relay URL itself, not to a remote the sandbox could have renamed, and
    ``--force-with-lease=<ref>:`` (an empty expected value) makes git refuse a branch that
    already exists instead of moving it. Hooks do not run (``--no-verify``).
    """
    url = relay_url(proxy_url, git_url)
    env = _environment(proxy_url, url, token)
    name = check_ref(branch, "branch")
    if name == "HEAD" or _COMMIT.fullmatch(name):
        raise errors.ConfigError("invalid branch: HEAD and commit ids cannot name a new branch")
    target = f"refs/heads/{name}"
    place = _check_directory(directory)
    command = ("git", "-C", place, *_own_clone(place), "push", "--quiet", "--no-verify",
               f"--force-with-lease={target}:", "--", url, f"HEAD:{target}")  # fmt: skip
    return GitInvocation(url, (command,), env)


def _connect_function() -> str:
    patterns = "|".join(f"*{shlex.quote(words)}*" for words in _NOT_CONNECTED)
    return f"""ironflow_connect() {{
  ironflow_try=1
  while :; do
    ironflow_err=$("$@" 2>&1 >/dev/null) && return 0
    ironflow_code=$?
    case "$ironflow_err" in {patterns}) ;; *) printf '%s\\n' "$ironflow_err" >&2; return "$ironflow_code" ;; esac
    if [ "$ironflow_try" -ge {CONNECT_TRIES} ]; then printf '%s\\n' "$ironflow_err" >&2; return "$ironflow_code"; fi
    ironflow_try=$((ironflow_try + 1))
    sleep 1
  done
}}"""


def _connect_lines(commands: tuple[tuple[str, ...], ...]) -> list[str]:
    return ["ironflow_connect " + shlex.join(argv) for argv in commands]


def connect_retried(commands: tuple[tuple[str, ...], ...]) -> str:
    """Shell lines running each command in turn, each retried while git said only that it could not
    connect (:data:`CONNECT_TRIES`, a second apart; no request was made, so none is repeated); any
    other failure is returned at once with git's words on stderr, and fails the line as before
    (under ``set -e`` the script stops)."""
    return "\n".join([_connect_function(), *_connect_lines(commands)])


def push_script(clone: GitInvocation, push: GitInvocation, *, directory: str, patch_file: str) -> str:
    """The shell of a push from a sandbox the step never ran in (or whose step's ``.git`` is not trusted):
    a fresh clone (``clone``), the patch applied to the index only (``git apply --cached``: no work
    tree, no attribute or filter conversion), a commit with hooks off whose message is
    ``$IRONFLOW_PUSH_MESSAGE``, and ``push``. It runs with ``clone.env``, :data:`COMMITTER` and
    :data:`PUSH_MESSAGE_ENV` in its environment.
    """
    place = _check_directory(directory)
    hooks_off = (*_own_clone(place), "-c", "core.hooksPath=/dev/null")
    apply = ("git", "-C", place, *hooks_off, "apply", "--cached", "--binary", _check_directory(patch_file))
    commit = ("git", "-C", place, *hooks_off, "commit", "--quiet", "--no-verify")
    lines = [_connect_function(), *_connect_lines(clone.commands), shlex.join(apply)]
    lines.append(shlex.join(commit) + f' --message "${PUSH_MESSAGE_ENV}"')
    lines += _connect_lines(push.commands)
    return "set -e\n" + "\n".join(lines) + "\n"


def push_failure(source: str, branch: str, said: str, *, token: str, silent: str) -> errors.WorkspaceRefused:
    """A failed push, in git's last words (e.g. the branch exists, or the ref moved and the patch
    no longer applies), the push's token masked should git ever repeat it; ``silent`` when git said nothing."""
    lines = (said.replace(token, "<token>") if token else said).strip().splitlines()
    last = errors.truncate(lines[-1] if lines else silent, 500)
    return errors.WorkspaceRefused(f"the git workspace push of '{source}' to '{branch}' failed: {last}")
