"""The named egress profiles a step or a provider file asks for by name (pure).

Each profile opens the hosts its tool really talks to, on port 443 only, and nothing it could
do without: a profile is a promise of what the sandbox reaches, so it stays minimal.

================  ==================================================================================
profile           hosts (443)
================  ==================================================================================
anthropic-only    none: the model is reached through the auth proxy's relay (the default)
pypi              pypi.org (index, JSON API), files.pythonhosted.org (distributions)
npm               registry.npmjs.org (metadata and tarballs)
github            github.com (git over HTTPS, archives), api.github.com, codeload.github.com
                  (archive downloads), raw.githubusercontent.com, objects.githubusercontent.com and
                  release-assets.githubusercontent.com (release and LFS downloads redirect there)
gitlab            gitlab.com (git over HTTPS, API, packages, archives)
go                proxy.golang.org (GOPROXY), sum.golang.org (GOSUMDB), storage.googleapis.com
                  (the module proxy redirects some module zips there; the widest host of this table)
================  ==================================================================================

A provider file's own profiles (``egress_profiles:``) come in as ``extra``; one named like a
built-in replaces it for that file.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ironflow import settings_file
from ironflow.egress import policy

__all__ = ["PROFILES", "from_json", "profile"]


def _hosts(*hosts: str) -> policy.EgressPolicy:
    """A profile allowing each of ``hosts`` on port 443."""
    return policy.EgressPolicy(allow=tuple(policy.Rule(host, ports=(443,)) for host in hosts))


PROFILES: Final[Mapping[str, policy.EgressPolicy]] = MappingProxyType(
    {
        "anthropic-only": policy.EgressPolicy(),
        "pypi": _hosts("pypi.org", "files.pythonhosted.org"),
        "npm": _hosts("registry.npmjs.org"),
        "github": _hosts(
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "raw.githubusercontent.com",
            "objects.githubusercontent.com",
            "release-assets.githubusercontent.com",
        ),
        "gitlab": _hosts("gitlab.com"),
        "go": _hosts("proxy.golang.org", "sum.golang.org", "storage.googleapis.com"),
    }
)


def from_json(raw: object, extra: Mapping[str, policy.EgressPolicy] = MappingProxyType({})) -> policy.EgressPolicy:
    """A policy from its wire form, its ``"profiles"`` names read as :func:`profile` reads them.

    Raises:
        InvalidEgressPolicy: one line naming the entry that is wrong.
    """
    return policy.EgressPolicy.from_json(raw, profiles={**PROFILES, **extra})


def profile(name: str, extra: Mapping[str, policy.EgressPolicy] = MappingProxyType({})) -> policy.EgressPolicy:
    """The profile called ``name``: one of ``extra`` (a provider file's own) or a built-in.

    Raises:
        InvalidEgressPolicy: no such profile; the message names the nearest or lists the known ones.
    """
    found = extra.get(name) or PROFILES.get(name)
    if found is None:
        known = sorted({*PROFILES, *extra})
        raise policy.InvalidEgressPolicy(settings_file.unknown_name_message("egress profile", name[:100], known))
    return found
