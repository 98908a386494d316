"""A step's Kubernetes objects, rendered once: :func:`render_step` → :class:`StepObjects` (pure).

One function of the settings, the step (its :class:`~ironflow.steps.StepScope` gives the
run and step labels), the clock, the pod name and the proxy token: a dry run
(``K8sEphemeralProvider.manifests``) and a launch render exactly the same objects. The
runner issues the token first and renders after, so there is never a draft render.

Never does I/O and never reads run identity back out of rendered labels: callers read
:attr:`StepObjects.scope`-free fields (names, expiry) from the value, not from dicts.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ironflow import errors, steps
from ironflow.auth_proxy import relays, tokens
from ironflow.auth_proxy.git_hosts import GitHosts
from ironflow.claude import command, layout, profile
from ironflow.egress import variables
from ironflow.k8s import environments, step_manifests
from ironflow.k8s.settings import ProviderSettings
from ironflow.k8s.workspaces import init_pods
from ironflow.secrets import Secret
from ironflow.workspaces import WORKSPACE_PATH, Workspace, git_script

__all__ = [
    "StepObjects",
    "check_egress",
    "check_relays",
    "check_step",
    "check_workspace",
    "egress_env",
    "refuse_workspace",
    "render_step",
    "workspace_secret",
]


@dataclass(frozen=True)
class StepObjects:
    """What one step creates: the pod, its prompt ConfigMap (large prompts) and a new
    environment claim (``environment_volume``, unless the step resumes one)."""

    pod: dict[str, Any]
    prompt_configmap: dict[str, Any] | None
    environment_claim: dict[str, Any] | None
    #: The environment the step mounts (new or resumed); None without an environment volume.
    environment_id: str | None
    pod_name: str
    #: Unix seconds of the ``ironflow.io/expires-at`` annotation on every object.
    expires_at: int

    @property
    def prompt_configmap_name(self) -> str | None:
        return None if self.prompt_configmap is None else str(self.prompt_configmap["metadata"]["name"])

    def in_creation_order(self) -> list[dict[str, Any]]:
        """ConfigMap, claim, pod: the order the runner creates them in."""
        return [o for o in (self.prompt_configmap, self.environment_claim, self.pod) if o is not None]


def _inputs(settings: ProviderSettings, config: steps.AgentConfig) -> step_manifests.PodInputs:
    """The merged pod inputs, with the step's own labels and its scope's run/step labels."""
    inputs = step_manifests.merged_pod_inputs(settings, config)
    if config.scope is None:
        return inputs
    return dataclasses.replace(inputs, labels={**inputs.labels, **config.scope.labels})


def refuse_workspace(config: steps.AgentConfig) -> None:
    """An agent-sandbox step takes a git workspace only: its pod is the warm pool's, made before
    the step (no claim or host directory can be mounted into it).

    Raises:
        StepConfigError: a directory or PVC workspace.
    """
    spec = config.workspace
    if spec is None:
        return
    if not spec.is_git or spec.is_pvc:
        raise errors.StepConfigError(
            "agent-sandbox steps take a git workspace only (the warm pod exists before the step): run a "
            "pvc: workspace on --backend k8s, or a directory on --backend local"
        )


def check_workspace(settings: ProviderSettings, config: steps.AgentConfig) -> None:
    """A pod's workspace is a git URL cloned through the auth proxy's relay, or a PVC: never a worker directory.

    Raises:
        StepConfigError: a host directory, ``keep_on_retry`` on a clone, or no auth proxy to clone through.
        WorkspaceRefused: no git credential for the workspace's host.
    """
    spec = config.workspace
    if spec is None or spec.is_pvc:
        return
    if not spec.is_git:
        raise errors.StepConfigError(
            "a pod cannot see the worker's directory: on Kubernetes give the workspace as a git URL "
            "(https://host/org/repo.git[@REF]) or a PersistentVolumeClaim (pvc:NAME[/SUBPATH])"
        )
    if spec.keep_on_retry:
        raise errors.StepConfigError(
            "keep_on_retry needs the local backend or a pvc: workspace: a pod's clone is gone with its pod"
        )
    if settings.auth_proxy_url is None:
        raise errors.StepConfigError(
            "a git workspace on Kubernetes needs auth_proxy(url): the pod clones through the proxy's git relay"
        )
    (settings.git_hosts or GitHosts()).secret_for(spec.git_host)


def check_relays(settings: ProviderSettings) -> None:
    """A provider's relays are reached through its auth proxy only.

    Raises:
        StepConfigError: relays without ``auth_proxy``.
    """
    if settings.relays and settings.auth_proxy_url is None:
        raise errors.StepConfigError(
            "relays on Kubernetes need auth_proxy(url): the pod reaches each relay's host through the proxy"
        )


def check_egress(settings: ProviderSettings) -> None:
    """A provider's egress policy is enforced by its auth proxy's egress proxy only.

    Raises:
        StepConfigError: a policy that opens something without ``auth_proxy``.
    """
    if variables.opens_anything(settings.egress) and settings.auth_proxy_url is None:
        raise errors.StepConfigError(
            "an egress policy on Kubernetes needs auth_proxy(url): the pod reaches what it allows through "
            "the proxy's egress listener"
        )


def egress_env(settings: ProviderSettings, token: Secret | None) -> dict[str, str]:
    """The variables sending the pod's HTTP(S) through the proxy Service's egress port with the
    step's egress-only token as the password (never the Claude token: every tool in the pod sees
    this URL, and that token reaches nothing else); none when the policy opens nothing. The
    proxy's own host (the model relay, the relays, a clone) is reached directly. Without
    ``token``, the address alone (an agent-sandbox template's; the token comes over exec)."""
    if not variables.opens_anything(settings.egress) or settings.auth_proxy_url is None:
        return {}
    url = variables.proxy_url(settings.auth_proxy_url)
    host = urllib.parse.urlsplit(settings.auth_proxy_url).hostname or ""
    password = None if token is None else token.reveal()
    return variables.proxy_env(url, password, bypass=[host, "localhost", "127.0.0.1"])


def workspace_secret(settings: ProviderSettings, config: steps.AgentConfig) -> tokens.SecretCredential | None:
    """The proxied secret a step's git workspace clones with (None: no workspace, or a PVC)."""
    if config.workspace is None or config.workspace.is_pvc:
        return None
    check_workspace(settings, config)
    return (settings.git_hosts or GitHosts()).secret_for(config.workspace.git_host)


def check_step(settings: ProviderSettings, config: steps.AgentConfig, *, worker_env: Mapping[str, str]) -> None:
    """Every invocation-time check of :func:`render_step`, before anything exists.

    Raises:
        PromptTooLarge, ToolProfileUnsupported, StepConfigError: the step is refused.
    """
    command.validate_prompt_size(config)
    check_workspace(settings, config)
    check_relays(settings)
    check_egress(settings)
    command.build_args(config, allow_bypass=worker_env.get(layout.ALLOW_BYPASS_ENV) == "1")
    inputs = _inputs(settings, config)
    if settings.environment is not None and config.resume_environment_id is not None:
        environments.environment_claim_for(config.resume_environment_id, now_ms=0, rand32=0)
    step_manifests.validate_hardening(settings, inputs)
    step_manifests.validate_inputs(config.inputs)


def _with_workspace(
    settings: ProviderSettings, spec: Workspace, pod: dict[str, Any], token: Secret | None
) -> dict[str, Any]:
    if spec.is_pvc:
        return init_pods.add_pvc_workspace(pod, spec)
    if token is None or settings.auth_proxy_url is None:
        raise errors.ConfigError("a git workspace needs the token of its git-host grant (workspace_token)")
    invocation = git_script.clone_commands(
        settings.auth_proxy_url, spec.source, token.reveal(), directory=WORKSPACE_PATH, ref=spec.ref
    )
    return init_pods.add_git_workspace(pod, spec, invocation)


def render_step(
    settings: ProviderSettings,
    config: steps.AgentConfig,
    *,
    now: int,
    pod_name: str,
    token: Secret | None,
    worker_env: Mapping[str, str],
    environment_id: str,
    workspace_token: Secret | None = None,
    relay_tokens: Sequence[tuple[relays.RelaySpec, Secret]] = (),
    egress_token: Secret | None = None,
) -> StepObjects:
    """The objects of one step. ``now`` is unix seconds; ``worker_env`` is the worker's
    environment (only names matter, plus ``IRONFLOW_ALLOW_BYPASS``); ``token`` is the
    ``ifap_`` token the proxy issued for this step; ``environment_id`` names a new
    environment claim (ignored without an environment volume or when the step resumes one);
    ``workspace_token`` the token of the step's git-host grant (a git workspace needs it);
    ``relay_tokens`` the token of each of the provider's relays (all of them, or none: a dry render);
    ``egress_token`` the step's egress-only token, the pod's proxy password (none: no proxy variables).

    Raises:
        PromptTooLarge, ToolProfileUnsupported, StepConfigError: the step is refused.
        ConfigError: ``token`` or ``egress_token`` without ``auth_proxy``; a git workspace without
            ``workspace_token``.
        WorkspaceRefused: no git credential for the workspace's host.
    """
    s = settings
    command.validate_prompt_size(config)
    check_workspace(s, config)
    check_relays(s)
    check_egress(s)
    if relay_tokens and [spec for spec, _ in relay_tokens] != list(s.relays):
        raise errors.ConfigError("relay_tokens must hold one token per relay of the provider, in its order")
    args = command.build_args(config, allow_bypass=worker_env.get(layout.ALLOW_BYPASS_ENV) == "1")
    inputs = _inputs(s, config)
    if (token is not None or egress_token is not None) and s.auth_proxy_url is None:
        raise errors.ConfigError("proxy_token needs a provider with auth_proxy(url): the pod would not reach it")
    claim: environments.EnvironmentClaim | None = None
    if s.environment is not None:
        resume = config.resume_environment_id
        if resume is not None:
            claim = environments.environment_claim_for(resume, now_ms=0, rand32=0)
        else:
            claim = environments.EnvironmentClaim(environment_id, resumed=False)
        mount = environments.environment_mount(s.environment, claim.name)
        inputs = dataclasses.replace(inputs, step_pvc_volumes=(*inputs.step_pvc_volumes, mount))

    from_secret = s.oauth_credentials_secret is not None
    prefix = (
        command.trace_prefix(config.trace_context)
        + profile.profile_copy_prefix(s.claude_profiles)
        + command.credentials_prefix(from_secret=from_secret, inline=None if from_secret else s.oauth_credentials)
    )
    stdin = command.prompt_via_stdin(config)
    shell = command.agent_shell_command(
        args,
        claude_path=s.claude_path,
        working_dir=config.working_dir or (WORKSPACE_PATH if config.workspace is not None else s.working_dir),
        prefix=prefix,
        prompt_file=command.prompt_file_path() if stdin else None,
    )
    expires_at = now + step_manifests.lifetime_seconds(s)
    plain = list(s.env_vars)
    if token is not None and s.auth_proxy_url is not None:
        plain += list(layout.proxy_env(s.auth_proxy_url, token.reveal()).items())
    if egress_token is not None:  # opaque, as the Claude token is: in the pod's env
        plain += list(egress_env(s, egress_token).items())
    if relay_tokens and s.auth_proxy_url is not None:  # opaque tokens only: each relay's value stays in the proxy
        plain += list(relays.relay_env(((spec, t.reveal()) for spec, t in relay_tokens), s.auth_proxy_url).items())
    configmap: dict[str, Any] | None = None
    if stdin:
        configmap = step_manifests.prompt_configmap(
            pod_name=pod_name,
            namespace=s.namespace,
            prompt=config.prompt,
            pod_labels=inputs.labels,
            expires_at=expires_at,
        )
    new_claim: dict[str, Any] | None = None
    if s.environment is not None and claim is not None and not claim.resumed:
        new_claim = environments.build_environment_claim(
            claim.name,
            namespace=s.namespace,
            volume=s.environment,
            pod_labels=inputs.labels,
            expires_at=environments.environment_expires_at(s.environment, now=now, lifetime_s=expires_at - now),
        )
    pod = step_manifests.build_pod(
        s,
        inputs,
        config,
        name=pod_name,
        shell_command=shell,
        plain_env=plain,
        worker_env=worker_env,
        expires_at=expires_at,
        prompt_configmap=None if configmap is None else str(configmap["metadata"]["name"]),
    )
    if config.workspace is not None:
        pod = _with_workspace(s, config.workspace, pod, workspace_token)
    return StepObjects(
        pod=pod,
        prompt_configmap=configmap,
        environment_claim=new_claim,
        environment_id=None if claim is None else claim.name,
        pod_name=pod_name,
        expires_at=expires_at,
    )
