"""``ironflow render``: print the objects a step would create, without touching a cluster.

A dry run of :meth:`~ironflow.k8s.K8sEphemeralProvider.manifests`: the provider comes from
a YAML file, the step from ``--prompt`` and an optional step YAML. The manifests go to
stdout (YAML documents or a JSON list); a refused setting exits 2 with one line on
stderr that names it.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Annotated, Any, Final

import typer

from ironflow import errors, settings_file, steps
from ironflow.auth_proxy.git_hosts import GitCredential, GitHosts
from ironflow.cli import untrusted, verbosity
from ironflow.cli.exits import fail, fail_for, in_file
from ironflow.cli.formats import ManifestFormat, emit_objects
from ironflow.k8s import pod_provider as k8s_provider
from ironflow.secrets import Secret

__all__ = ["DRY_RUN_PROXY_TOKEN", "register", "render"]

#: Stands in for the ``ifap_`` token the auth proxy issues at launch, so a dry run of a
#: proxied provider shows the env the pod will get.
DRY_RUN_PROXY_TOKEN: Final = "ifap_issued-at-launch"  # noqa: S105 - a visible placeholder, not a credential


def _load_step(path: Path | None, prompt: str | None) -> steps.AgentConfig:
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = settings_file.decode(settings_file.read_text(path, what="step file"), source=f"step file '{path}'")
        except errors.ConfigError as exc:
            fail(exc.message)
        if loaded is not None and not isinstance(loaded, dict):
            fail(f"step file '{path}' must hold a mapping of step settings")
        data = dict(loaded or {})
    if prompt is not None:
        data["prompt"] = prompt
    if not data.get("prompt"):
        fail("no prompt: pass --prompt TEXT or set 'prompt' in the step file")
    with warnings.catch_warnings(record=True) as caught:  # an old spelling in the file: the user's to fix
        warnings.simplefilter("always", DeprecationWarning)
        config = steps.AgentConfig.from_dict(data)  # its type and text checks raise ConfigError, by name
    for warning in caught:
        verbosity.note(f"step file '{path}': {warning.message}")
    return config


def render(
    provider_file: Annotated[
        Path, typer.Option("--provider", help="Provider settings (YAML, see docs/k8s-provider.md).")
    ],
    prompt: Annotated[str | None, typer.Option("--prompt", help="The step prompt (wins over the step file).")] = None,
    step_file: Annotated[Path | None, typer.Option("--step", help="Step settings (YAML).")] = None,
    output: Annotated[ManifestFormat, typer.Option("--output", "-o", help="yaml or json.")] = ManifestFormat.YAML,
    untrusted_files: untrusted.UntrustedOption = None,
) -> None:
    """Print the Kubernetes objects a step would create (dry run; nothing is sent)."""
    try:
        provider = k8s_provider.K8sEphemeralProvider.from_file(provider_file)
    except errors.ConfigError as exc:
        fail(in_file("provider file", provider_file, exc.message))
    try:
        config = _load_step(step_file, prompt)
        if untrusted_files:
            config = config.replace(prompt=untrusted.prompt_with(config.prompt, untrusted_files))
        token = DRY_RUN_PROXY_TOKEN if provider.settings.auth_proxy_url is not None else None
        spec = config.workspace
        if spec is not None and spec.is_git:  # the host's token is the proxy's: a dry run needs none
            provider = provider.git_credentials(GitHosts({spec.git_host: GitCredential(Secret("dry-run"))}))
        objects = provider.manifests(
            config, proxy_token=token, worker_env=dict(os.environ), workspace_token=token, egress_token=token
        )
    except errors.IronflowError as exc:
        fail_for(exc)
    emit_objects(objects, output)


def register(app: typer.Typer) -> None:
    app.command("render")(render)
