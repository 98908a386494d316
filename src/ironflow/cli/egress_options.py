"""The egress options ``exec``, ``agent`` and ``sandbox open`` share, and a local provider file's keys.

``--allow-host HOST[:PORT]``, ``--egress-profile NAME`` and ``--egress FILE`` (each repeatable) make
one policy with :func:`ironflow.egress.options.policy_from_options`; a local provider file's
``egress:`` comes first and its ``egress_profiles:`` are names the options may use. Nothing given
and no ``egress:``: no policy (the sandbox has no network but the model). Bad input exits 2 with
one line naming the option or the file. Pure values and file reads: the egress proxy's server loads
when a sandbox starts, never here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from ironflow import errors, settings_file
from ironflow.cli import exits
from ironflow.egress import EgressPolicy
from ironflow.egress import options as egress_options

if TYPE_CHECKING:  # the relays (and their token types) load with a provider file, not with every command
    from ironflow.auth_proxy import relays as relay_specs

__all__ = [
    "LOCAL_FILE_KEYS",
    "LocalFile",
    "command_policy",
    "local_file",
]


#: The keys of a local provider file (``--backend local --provider FILE``).
LOCAL_FILE_KEYS: Final = ("relays", "egress", "egress_profiles")


@dataclass(frozen=True)
class LocalFile:
    """What a local provider file holds: relays, and an egress policy with its own profiles."""

    relays: tuple[relay_specs.RelaySpec, ...] = ()
    egress: EgressPolicy | None = None
    profiles: Mapping[str, EgressPolicy] = field(default_factory=lambda: MappingProxyType({}))


def local_file(path: Path | None) -> LocalFile:
    """The ``relays:`` (each value from the variable its ``credential_env`` names), ``egress:`` and
    ``egress_profiles:`` of ``--provider FILE`` for ``--backend local``; exits 2 naming what is wrong."""
    if path is None:
        return LocalFile()
    from ironflow.auth_proxy import relays as relay_specs

    try:
        top = settings_file.load(path, what="provider file", known=LOCAL_FILE_KEYS)
        relays = relay_specs.parse_relays(top, "env")
        if not top.has("egress") and not top.has("egress_profiles"):
            return LocalFile(relays)
        policy, profiles = egress_options.file_policy(
            top.data.get("egress"), top.data.get("egress_profiles"), source=f"provider file '{path}'"
        )
    except errors.ConfigError as exc:
        exits.fail(exits.in_file("provider file", path, exc.message))
    return LocalFile(relays, policy if top.has("egress") else None, profiles)


def command_policy(
    allow_hosts: Sequence[str] | None,
    profiles: Sequence[str] | None,
    files: Sequence[Path] | None,
    base: LocalFile | None = None,
) -> EgressPolicy | None:
    """The file's ``egress:`` with the options' rules added; None when neither says anything."""
    base = base or LocalFile()
    if not (allow_hosts or profiles or files):
        return base.egress
    try:
        contents = [(f"egress file '{p}'", settings_file.read_text(p, what="egress file")) for p in files or ()]
        given = egress_options.policy_from_options(allow_hosts or (), profiles or (), contents, base.profiles)
    except errors.ConfigError as exc:
        exits.fail(exc.message)
    return given if base.egress is None else base.egress.merged(given)
