"""Parse a Dockerfile and lint the runner image against its rules (pure).

No Docker engine runs where the tests run, so the runner image's promises (a base
pinned by digest, a verified Claude Code version, uid 10001, root-owned read-only
settings directories, no auto-update) are checked on the parsed Dockerfile instead.
This module never reads files or runs commands: it takes text and returns values; the
``__main__`` block at the bottom is the only I/O edge.

Rules of :func:`lint_runner_dockerfile` (each :class:`Problem` names one):

============================  =================================================================
rule                          the Dockerfile must...
============================  =================================================================
``single-stage``              have exactly one ``FROM``
``base-digest``               pin its base as ``image[:tag]@sha256:<64 hex>``, never ``latest``,
                              written in ``FROM`` or as the default of the ``ARG`` it names
                              (``ARG NODE_BASE=…@sha256:…`` + ``FROM ${NODE_BASE}``: a local
                              build passes its own base, :mod:`ironflow.cluster.image_builds`)
``version-arg``               declare ``ARG CLAUDE_CODE_VERSION`` after ``FROM``, defaulting to
                              the pinned version when one is given
``version-verified``          install ``@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}`` and
                              compare ``claude --version`` with it in the same ``RUN``
``no-latest``                never name ``latest`` (base tag, npm version, anything)
``user-10001``                create group and user 10001 with HOME ``/home/claude`` and end
                              on ``USER 10001:10001`` (numeric: runAsNonRoot can check it)
``env``                       set ``HOME=/home/claude``, ``DISABLE_AUTOUPDATER=1`` and
                              ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``
``managed-settings``          write ``/etc/claude-code/managed-settings.json`` with
                              ``strictKnownMarketplaces: []`` and ``disableAllHooks: true``
``root-owned-dirs``           ``chown root:root`` and ``chmod 0755`` ``/etc/claude-code``,
                              ``/etc/ironflow`` and ``/etc/ironflow/claude-profile``
``workdir``                   end with ``WORKDIR /home/claude``
============================  =================================================================
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from typing import Final

from ironflow.claude import layout

__all__ = [
    "CLAUDE_CODE_VERSION_ARG",
    "Dockerfile",
    "Instruction",
    "Problem",
    "lint_image_tag",
    "lint_runner_dockerfile",
    "parse_dockerfile",
    "resolve_base",
    "shell_commands",
]

CLAUDE_CODE_VERSION_ARG: Final = "CLAUDE_CODE_VERSION"
_NPM_PACKAGE: Final = "@anthropic-ai/claude-code"
_ROOT_OWNED_DIRS: Final = (layout.MANAGED_SETTINGS_DIR, "/etc/ironflow", layout.PROFILE_MOUNT_DIR)
_MANAGED_SETTINGS_PATH: Final = f"{layout.MANAGED_SETTINGS_DIR}/{layout.MANAGED_SETTINGS_FILE}"
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
_REQUIRED_ENV: Final = {
    "HOME": layout.SANDBOX_HOME,
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
_UID: Final = str(layout.SANDBOX_UID)
_RUN_OPTIONS: Final = ("--mount=", "--network=", "--security=")
_RESERVED_WORDS: Final = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"})
_ARG_REFERENCE: Final = re.compile(r"\$\{?(?P<arg>[A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword upper-cased, its arguments with continuations joined."""

    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON (exec) form's arguments, or None for the shell form."""
        if not self.args.startswith("["):
            return None
        try:
            value = json.loads(self.args)
        except json.JSONDecodeError:
            return None
        return [str(v) for v in value] if isinstance(value, list) else None


@dataclass(frozen=True)
class Dockerfile:
    instructions: tuple[Instruction, ...]

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass(frozen=True)
class Problem:
    """One broken rule: which, where (1-based line, None for the whole file), and the fix."""

    rule: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}[{self.rule}] {self.message}"


def parse_dockerfile(text: str) -> Dockerfile:
    """Split ``text`` into instructions the way the builder does.

    Comment lines are dropped, also inside a continued instruction; a trailing ``\\``
    joins the next line. Parser directives and the ``escape`` directive are not
    supported: a Dockerfile that needs them is not one of ours.

    >>> parse_dockerfile("FROM a\\nRUN echo 1 \\\\\\n  # c\\n  && echo 2").instructions[1].args
    'echo 1 && echo 2'
    """
    instructions: list[Instruction] = []
    parts: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not parts:
            start = number
        continued = stripped.endswith("\\")
        parts.append(stripped[:-1].strip() if continued else stripped)
        if not continued:
            instructions.append(_instruction(parts, start))
            parts = []
    if parts:
        instructions.append(_instruction(parts, start))
    return Dockerfile(tuple(instructions))


def _instruction(parts: list[str], line: int) -> Instruction:
    joined = " ".join(p for p in parts if p)
    keyword, _, args = joined.partition(" ")
    return Instruction(keyword.upper(), args.strip(), line)


def _env_pairs(args: str) -> dict[str, str]:
    """``ENV a=1 b="2"`` and the legacy ``ENV a 1`` as a mapping."""
    tokens = shlex.split(args)
    if tokens and "=" not in tokens[0]:
        return {tokens[0]: " ".join(tokens[1:])}
    return dict(t.split("=", 1) for t in tokens if "=" in t)


def shell_commands(run: str) -> list[list[str]]:
    """A RUN's shell text as simple commands split on ``&&``, ``;`` and ``||`` (no execution).

    The RUN's own options (``--mount=…``) and the shell's reserved words that open a command
    (``if``, ``then``, ``else``…) are dropped, so ``then npm install x`` reads as ``npm install x``.

    >>> shell_commands("--mount=type=bind,source=a,target=/a if [ -f x ]; then npm ci; fi")
    [['[', '-f', 'x', ']'], ['npm', 'ci']]
    """
    lexer = shlex.shlex(run, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    tokens = list(lexer)
    while tokens and tokens[0].startswith(_RUN_OPTIONS):
        tokens.pop(0)
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token in {"&&", ";", "||", "&", "|"}:
            commands.append([])
        elif commands[-1] or token not in _RESERVED_WORDS:
            commands[-1].append(token)
    return [c for c in commands if c]


def resolve_base(parsed: Dockerfile, instruction: Instruction) -> str:
    """The image a ``FROM`` names, with ``${ARG}`` replaced by that ARG's default before the first FROM.

    An ARG with no default stays as written (``${ARG}``), so a caller can tell it must be given.

    >>> d = parse_dockerfile("ARG B=node:22@sha256:" + "a" * 64 + "\\nFROM ${B}")
    >>> resolve_base(d, d.of("FROM")[0]) == "node:22@sha256:" + "a" * 64
    True
    """
    image = instruction.args.split()[0] if instruction.args else ""
    match = _ARG_REFERENCE.fullmatch(image)
    if match is None:
        return image
    froms = parsed.of("FROM")
    first = froms[0].line if froms else 0
    defaults = dict(i.args.partition("=")[::2] for i in parsed.of("ARG") if i.line < first and "=" in i.args)
    return defaults.get(match["arg"], image).strip().strip('"')


def lint_runner_dockerfile(parsed: Dockerfile, *, claude_code_version: str | None = None) -> list[Problem]:
    """Every broken rule of the module table, in rule order; empty when the image is sound.

    ``claude_code_version`` is the pinned version (the ``CLAUDE_CODE_VERSION`` file):
    when given, the build argument's default must equal it.
    """
    problems: list[Problem] = []
    problems += _lint_base(parsed)
    problems += _lint_version(parsed, claude_code_version)
    problems += _lint_no_latest(parsed)
    problems += _lint_user(parsed)
    problems += _lint_env(parsed)
    problems += _lint_managed_settings(parsed)
    problems += _lint_root_owned_dirs(parsed)
    problems += _lint_workdir(parsed)
    return problems


def _lint_base(parsed: Dockerfile) -> list[Problem]:
    froms = parsed.of("FROM")
    if len(froms) != 1:
        return [Problem("single-stage", f"expected exactly one FROM, found {len(froms)}: keep the image single-stage")]
    image = resolve_base(parsed, froms[0])
    if not _DIGEST.search(image):
        return [
            Problem(
                "base-digest",
                f"base image '{image}' is not pinned by digest: write it as image:tag@sha256:<digest> "
                "(in FROM, or as the default of the ARG it names)",
                froms[0].line,
            )
        ]
    return []


def _lint_version(parsed: Dockerfile, version: str | None) -> list[Problem]:
    problems: list[Problem] = []
    froms = parsed.of("FROM")
    from_line = froms[0].line if froms else 0
    args = [i for i in parsed.of("ARG") if i.args.split("=", 1)[0].strip() == CLAUDE_CODE_VERSION_ARG]
    if not args:
        problems.append(
            Problem("version-arg", f"no ARG {CLAUDE_CODE_VERSION_ARG}: declare it after FROM so the build can pin it")
        )
    else:
        arg = args[-1]
        if arg.line < from_line:
            problems.append(
                Problem(
                    "version-arg",
                    f"ARG {CLAUDE_CODE_VERSION_ARG} is declared before FROM, so RUN cannot see it: move it after FROM",
                    arg.line,
                )
            )
        _, has_default, default = arg.args.partition("=")
        default = default.strip().strip('"')
        if version is not None and has_default and default != version:
            problems.append(
                Problem(
                    "version-arg",
                    f"ARG {CLAUDE_CODE_VERSION_ARG} defaults to '{default}' but the pinned version is '{version}': "
                    "make them equal",
                    arg.line,
                )
            )
    ref = "${" + CLAUDE_CODE_VERSION_ARG + "}"
    verified = False
    for run in parsed.of("RUN"):
        commands = shell_commands(run.args)
        installs = any(c[:2] == ["npm", "install"] and f"{_NPM_PACKAGE}@{ref}" in c for c in commands)
        checks = "claude --version" in run.args and any(
            c and c[0] == "test" and ref in c and "=" in c for c in commands
        )
        if installs and checks:
            verified = True
    if not verified:
        problems.append(
            Problem(
                "version-verified",
                f"no RUN both installs {_NPM_PACKAGE}@{ref} and checks `claude --version` against {ref}: "
                "the build must fail when the CLI reports another version",
            )
        )
    return problems


def _lint_no_latest(parsed: Dockerfile) -> list[Problem]:
    return [
        Problem("no-latest", "'latest' is never a version here: pin a tag, a digest or a version", i.line)
        for i in parsed.instructions
        if re.search(r"(:|@)latest\b", i.args)
    ]


def _lint_user(parsed: Dockerfile) -> list[Problem]:
    problems: list[Problem] = []
    commands = [c for run in parsed.of("RUN") for c in shell_commands(run.args)]
    group_ok = any(c[0] == "groupadd" and _option(c, "-g") == _UID for c in commands)
    user_ok = any(
        c[0] == "useradd"
        and _option(c, "-u") == _UID
        and _option(c, "-g") == _UID
        and _option(c, "-d") == layout.SANDBOX_HOME
        for c in commands
    )
    if not (group_ok and user_ok):
        problems.append(
            Problem(
                "user-10001",
                f"create the agent's group and user: groupadd -g {_UID} and useradd -u {_UID} -g {_UID} "
                f"-d {layout.SANDBOX_HOME}",
            )
        )
    users = parsed.of("USER")
    if not users or users[-1].args != f"{_UID}:{_UID}":
        problems.append(
            Problem(
                "user-10001",
                f"the last USER must be the numeric {_UID}:{_UID} (found "
                f"'{users[-1].args if users else 'none'}'): the image must never run as root",
                users[-1].line if users else None,
            )
        )
    return problems


def _option(command: list[str], flag: str) -> str | None:
    for index, token in enumerate(command[:-1]):
        if token == flag:
            return command[index + 1]
    return None


def _lint_env(parsed: Dockerfile) -> list[Problem]:
    env: dict[str, str] = {}
    for instruction in parsed.of("ENV"):
        env.update(_env_pairs(instruction.args))
    return [
        Problem("env", f"ENV {name} is '{env.get(name, '')}': set ENV {name}={value}")
        for name, value in _REQUIRED_ENV.items()
        if env.get(name) != value
    ]


def _lint_managed_settings(parsed: Dockerfile) -> list[Problem]:
    for run in parsed.of("RUN"):
        tokens = [t for c in shell_commands(run.args) for t in c]
        for index, word in enumerate(tokens):
            target = tokens[index + 1] if word == ">" and index + 1 < len(tokens) else word.removeprefix(">")
            if word.startswith(">") and target == _MANAGED_SETTINGS_PATH:
                return _check_settings_json(tokens[index - 1] if index else "", run.line)
    return [
        Problem(
            "managed-settings",
            f"no RUN writes {_MANAGED_SETTINGS_PATH}: bake a default with no marketplace and no hooks",
        )
    ]


def _check_settings_json(text: str, line: int) -> list[Problem]:
    try:
        settings = json.loads(text)
    except json.JSONDecodeError:
        return [Problem("managed-settings", f"the baked {_MANAGED_SETTINGS_PATH} is not JSON: {text[:60]!r}", line)]
    problems: list[Problem] = []
    if not isinstance(settings, dict) or settings.get("strictKnownMarketplaces") != []:
        message = 'the baked settings must set "strictKnownMarketplaces": [] (no marketplace)'
        problems.append(Problem("managed-settings", message, line))
    if not isinstance(settings, dict) or settings.get("disableAllHooks") is not True:
        problems.append(Problem("managed-settings", 'the baked settings must set "disableAllHooks": true', line))
    return problems


def _lint_root_owned_dirs(parsed: Dockerfile) -> list[Problem]:
    owned: set[str] = set()
    moded: set[str] = set()
    problems: list[Problem] = []
    for run in parsed.of("RUN"):
        for command in shell_commands(run.args):
            paths = [t for t in command[1:] if t.startswith("/")]
            recursive = "-R" in command
            if command[0] == "chown":
                owner = next((t for t in command[1:] if not t.startswith("-")), "")
                for directory in _ROOT_OWNED_DIRS:
                    covered = directory in paths or (
                        recursive and any(directory.startswith(p.rstrip("/") + "/") for p in paths)
                    )
                    if covered and owner in {"root:root", "0:0", "root", "0"}:
                        owned.add(directory)
                    elif covered:
                        owned.discard(directory)
                        problems.append(
                            Problem(
                                "root-owned-dirs",
                                f"{directory} is given to '{owner}': it must stay root-owned",
                                run.line,
                            )
                        )
            if command[0] == "chmod":
                mode = next((t for t in command[1:] if not t.startswith("-")), "")
                for directory in _ROOT_OWNED_DIRS:
                    if directory in paths:
                        if mode in {"0755", "755"}:
                            moded.add(directory)
                        else:
                            moded.discard(directory)
                            problems.append(
                                Problem("root-owned-dirs", f"{directory} gets mode {mode}: use 0755", run.line)
                            )
    for directory in _ROOT_OWNED_DIRS:
        if directory not in owned:
            problems.append(Problem("root-owned-dirs", f"no `chown root:root` covers {directory}"))
        if directory not in moded:
            problems.append(Problem("root-owned-dirs", f"no `chmod 0755 {directory}`"))
    return problems


def _lint_workdir(parsed: Dockerfile) -> list[Problem]:
    workdirs = parsed.of("WORKDIR")
    if not workdirs or workdirs[-1].args != layout.SANDBOX_HOME:
        return [Problem("workdir", f"end with WORKDIR {layout.SANDBOX_HOME}, the agent's writable HOME")]
    return []


def lint_image_tag(tag: str, claude_code_version: str) -> list[Problem]:
    """An ``IMAGE_TAG`` must read ``<claude-code-version>-<n>`` with ``n >= 1``, never ``latest``.

    >>> lint_image_tag("2.1.332-1", "2.1.332")
    []
    """
    tag = tag.strip()
    match = re.fullmatch(re.escape(claude_code_version) + r"-([1-9][0-9]*)", tag)
    if match is None:
        return [
            Problem(
                "image-tag",
                f"image tag '{tag}' must be '{claude_code_version}-<n>' (the Claude Code version, then a "
                "rebuild number from 1), never 'latest'",
            )
        ]
    return []


def _main(argv: list[str]) -> int:
    """``python -m ironflow.cluster.dockerfile PATH [VERSION]``: print each problem, exit 1 if any."""
    if not argv:
        print("usage: python -m ironflow.cluster.dockerfile DOCKERFILE [CLAUDE_CODE_VERSION]", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        parsed = parse_dockerfile(handle.read())
    problems = lint_runner_dockerfile(parsed, claude_code_version=argv[1] if len(argv) > 1 else None)
    for problem in problems:
        print(f"{argv[0]}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
