"""The Claude Code CLI as every sandbox runs it: argv, output, rate limits, profiles, layout.

Layering rule: these modules are pure functions of their inputs about the CLI — they
build its command line (``command``), read its ``json``/``stream-json`` output
(``output``) and show it condensed, a line at a time (``turns``), read its
``rate_limit_event`` lines (``rate_limits``), place profile ConfigMaps (``profile``)
and name the sandbox paths and variables (``layout``). None
of them runs a process, opens a socket or reads the environment; the one exception is
:func:`~ironflow.claude.cli.find_claude_cli`, which looks for the pinned executable on
disk. Providers (``ironflow.k8s``, ``ironflow.local``, ``ironflow.agent_sandbox``) import
from here; nothing here imports a provider. The facade loads each name on first use, so a
module that needs ``layout`` alone (a plain command's sandbox) does not pay for the rest.
"""

from typing import TYPE_CHECKING

from ironflow._lazy import lazy_exports

if TYPE_CHECKING:
    from ironflow.claude.cli import CLAUDE_CODE_VERSION, find_claude_cli
    from ironflow.claude.command import agent_shell_command, build_args, shell_quote, validate_prompt_size
    from ironflow.claude.output import PartialUsage, parse_output
    from ironflow.claude.profile import ClaudeProfile
    from ironflow.claude.rate_limits import RateLimitWindow, collect_rate_limits, parse_rate_limit_event

__all__ = [
    "CLAUDE_CODE_VERSION",
    "ClaudeProfile",
    "PartialUsage",
    "RateLimitWindow",
    "agent_shell_command",
    "build_args",
    "collect_rate_limits",
    "find_claude_cli",
    "parse_output",
    "parse_rate_limit_event",
    "shell_quote",
    "validate_prompt_size",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "cli": ("CLAUDE_CODE_VERSION", "find_claude_cli"),
        "command": ("agent_shell_command", "build_args", "shell_quote", "validate_prompt_size"),
        "output": ("PartialUsage", "parse_output"),
        "profile": ("ClaudeProfile",),
        "rate_limits": ("RateLimitWindow", "collect_rate_limits", "parse_rate_limit_event"),
    },
)
