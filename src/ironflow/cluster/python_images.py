"""The supply-chain rules of the Python images (auth proxy, worker), checked on their Dockerfiles (pure).

No Docker engine runs where the tests run, so what the images promise is checked on the
parsed Dockerfile (:func:`ironflow.cluster.dockerfile.parse_dockerfile`) and on the hash
lock's text. Never reads a file: text in, problems out.

============================  =================================================================
rule                          the Dockerfile must...
============================  =================================================================
``base-digest``               name every base image by digest: ``image:tag@sha256:<64 hex>``, or
                              ``image:tag@${ARG}`` where ``ARG`` is declared before the first
                              ``FROM`` with no default (a build without it stops at ``FROM``);
                              in ``FROM`` or as the default of the ``ARG`` it names
                              (``ARG PYTHON_BASE=python:…@${PYTHON_BASE_DIGEST}`` + ``FROM
                              ${PYTHON_BASE}``: a local build passes its own base)
``require-hashes``            run every ``pip install`` either with ``--require-hashes --no-deps
                              -r`` the lock, or with ``--no-index --no-deps`` (the build context
                              only): nothing reaches the image unhashed
``lock-copied``               copy :data:`LOCK_PATH` into the build stage
============================  =================================================================

And the lock (:func:`lint_lock`): every requirement is ``name==version`` with at least one
``--hash=sha256:<64 hex>``, each name once.
"""

from __future__ import annotations

import re
from typing import Final

from ironflow.cluster import dockerfile

__all__ = ["LOCK_PATH", "lint_lock", "lint_python_dockerfile", "lock_pins"]

#: The hash lock both images install, from the repository root (scripts/lock-python-images.py).
LOCK_PATH: Final = "docker/requirements.lock"
_PINNED: Final = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")
_REQUIRED_ARG: Final = re.compile(r"[^@\s]+@\$\{(?P<arg>[A-Za-z_][A-Za-z0-9_]*)(:\?[^}]*)?\}")
_REQUIREMENT: Final = re.compile(r"(?P<name>[a-z0-9][a-z0-9._-]*)==(?P<version>[^\s\\]+)")
_HASH: Final = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def lint_python_dockerfile(parsed: dockerfile.Dockerfile) -> list[dockerfile.Problem]:
    """Every broken rule of the module table, in rule order; empty when the image is sound."""
    return _lint_bases(parsed) + _lint_pip(parsed) + _lint_lock_copied(parsed)


def _lint_bases(parsed: dockerfile.Dockerfile) -> list[dockerfile.Problem]:
    froms = parsed.of("FROM")
    first = froms[0].line if froms else 0
    # Declared before FROM with no default: a build must give it.
    required = {i.args.strip() for i in parsed.of("ARG") if i.line < first and "=" not in i.args}
    stages: set[str] = set()
    problems: list[dockerfile.Problem] = []
    for instruction in froms:
        words = instruction.args.split()
        image = words[0] if words and words[0] in stages else dockerfile.resolve_base(parsed, instruction)
        match = _REQUIRED_ARG.fullmatch(image)
        pinned = image in stages or _PINNED.fullmatch(image) or (match is not None and match["arg"] in required)
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2])
        if pinned:
            continue
        problems.append(
            dockerfile.Problem(
                "base-digest",
                f"base image '{image}' is not pinned by digest: write image:tag@sha256:<digest>, or "
                "image:tag@${ARG} with ARG declared before FROM without a default (in FROM, or as the "
                "default of the ARG it names)",
                instruction.line,
            )
        )
    return problems


def _lint_pip(parsed: dockerfile.Dockerfile) -> list[dockerfile.Problem]:
    problems: list[dockerfile.Problem] = []
    for run in parsed.of("RUN"):
        for command in dockerfile.shell_commands(run.args):
            if not (command and command[0].endswith("pip") and command[1:2] == ["install"]):
                continue
            hashed = {"--require-hashes", "--no-deps", "-r"} <= set(command)
            local_only = {"--no-index", "--no-deps"} <= set(command)
            if not (hashed or local_only):
                problems.append(
                    dockerfile.Problem(
                        "require-hashes",
                        f"`{' '.join(command)}` installs unhashed packages: use --require-hashes --no-deps -r "
                        f"{LOCK_PATH.rpartition('/')[2]}, or --no-index --no-deps for the build context",
                        run.line,
                    )
                )
    return problems


def _lint_lock_copied(parsed: dockerfile.Dockerfile) -> list[dockerfile.Problem]:
    if any(i.args.split()[:1] == [LOCK_PATH] for i in parsed.of("COPY")):
        return []
    return [dockerfile.Problem("lock-copied", f"no COPY {LOCK_PATH}: the hashed install needs the lock")]


def lock_pins(text: str) -> dict[str, str]:
    """``{name: version}`` of a hash lock (names lower-case, as written).

    >>> lock_pins("a==1 \\\\\\n    --hash=sha256:" + "0" * 64 + "\\n")
    {'a': '1'}
    """
    return {m["name"]: m["version"] for m in _REQUIREMENT.finditer(text)}


def lint_lock(text: str) -> list[dockerfile.Problem]:
    """Every requirement pinned with ``==`` and hashed, each name once."""
    entries = [e for e in re.split(r"(?<!\\)\n", text) if e.strip() and not e.lstrip().startswith("#")]
    problems: list[dockerfile.Problem] = []
    seen: set[str] = set()
    for entry in entries:
        match = _REQUIREMENT.match(entry.strip())
        if match is None:
            problems.append(dockerfile.Problem("lock", f"'{entry.splitlines()[0]}' is not pinned as name==version"))
            continue
        if match["name"] in seen:
            problems.append(dockerfile.Problem("lock", f"{match['name']} is pinned twice"))
        seen.add(match["name"])
        if not _HASH.search(entry):
            problems.append(dockerfile.Problem("lock", f"{match['name']}=={match['version']} has no sha256 hash"))
    return problems
