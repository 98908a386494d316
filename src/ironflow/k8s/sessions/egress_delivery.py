"""A cluster session's egress: its policy at open, its token delivered by exec, revoked at close.

A Kubernetes session takes an egress policy at open (the provider's ``egress:`` with the
session's own, ``sandbox open --allow-host``; :func:`opened_with` decides it and what the pod names,
:func:`has_egress` reads it back from a pod): the worker issues an egress-only token of the
session's (run ``<session id>``, step ``session``, expiring with its TTL) carrying the policy,
and once the pod runs writes the proxy variables with that token as their password
(:func:`~ironflow.k8s.step_objects.egress_env`, as a pod step's) into a 0600 file of the pod's
HOME, by one exec whose stdin carries them. The pod's manifest names only that file
(:data:`~ironflow.sandbox_runtime.SESSION_ENV`); the runtime gives its variables to every
command it starts (a command's own ``env`` over them), before the write none: the commands
then reach nothing. Close revokes the session's tokens by its id, from any process. The
session pods' NetworkPolicy lets them reach kube-dns and the proxy's egress listener alone
(:mod:`ironflow.cluster.session_network`).

Invariant: the token is never in an API object, an argv, a log line or an error.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Final

from ironflow import errors
from ironflow.auth_proxy import issuing
from ironflow.claude import command, layout
from ironflow.egress import EgressPolicy, variables
from ironflow.k8s import pods, step_objects
from ironflow.k8s.sessions import session_pod
from ironflow.k8s.settings import ProviderSettings
from ironflow.kube import api as kube
from ironflow.sandbox_runtime import SESSION_ENV
from ironflow.sessions.values import OpenOptions

__all__ = [
    "ENV_FILE",
    "STEP",
    "deliver",
    "has_egress",
    "manifest_env",
    "opened_with",
    "policy_for",
    "revoke",
    "write_command",
]

#: Where the session's proxy variables land: beside the runtime's token FIFO, in its 0700 directory.
ENV_FILE: Final = f"{layout.SANDBOX_HOME}/.ironflow/session-env"
#: The step name of a session's egress token (its run is the session's id).
STEP: Final = "session"


def policy_for(settings: ProviderSettings, extra: EgressPolicy | None) -> EgressPolicy | None:
    """The provider's policy with the session's own added; None when together they open nothing.

    Raises:
        ConfigError: a policy that opens something without ``auth_proxy`` (nothing would enforce it).
    """
    found = settings.egress if extra is None else extra if settings.egress is None else settings.egress.merged(extra)
    if not variables.opens_anything(found):
        return None
    if settings.auth_proxy_url is None:
        raise errors.ConfigError(
            "egress in a Kubernetes session needs auth_proxy(url): its commands reach what the policy allows "
            "through the proxy's egress listener"
        )
    return found


def opened_with(
    settings: ProviderSettings, options: OpenOptions, *, backend: str
) -> tuple[EgressPolicy | None, OpenOptions]:
    """The session's policy (:func:`policy_for`), and its options with the pod's :func:`manifest_env`
    when this open renders the pod; a template's pod (an agent-sandbox claim's) names the variables' file
    itself, and only when the pod settings take egress.

    Raises:
        ConfigError: as :func:`policy_for`; egress asked of a template rendered without it.
    """
    egress = policy_for(settings, options.egress)
    if egress is None:
        return None, options
    if backend != session_pod.BACKEND:
        if not variables.opens_anything(settings.egress):  # refused, never dropped
            raise errors.ConfigError(
                f"egress: a {backend} session's pod is its template's, rendered without egress: "
                "give the pod settings an egress: and run 'ironflow sandbox apply-template'"
            )
        return egress, options
    return egress, dataclasses.replace(options, env={**options.env, **manifest_env()})


def has_egress(settings: ProviderSettings, env: Mapping[str, str], *, backend: str) -> bool:
    """Whether a session was opened with an egress policy: its pod's ``env`` names the delivered
    variables (a template's pod, whenever its settings take egress)."""
    if backend != session_pod.BACKEND:
        return variables.opens_anything(settings.egress)
    return SESSION_ENV in env


def manifest_env() -> dict[str, str]:
    """What the session pod's manifest gets: where the runtime finds the variables, never them."""
    return {SESSION_ENV: ENV_FILE}


def write_command(size: int) -> tuple[str, ...]:
    """Read exactly ``size`` bytes of stdin into :data:`ENV_FILE` (0600), whole or not at all."""
    target = command.shell_quote(ENV_FILE)
    folder = command.shell_quote(ENV_FILE.rsplit("/", 1)[0])
    script = f"umask 077 && mkdir -p {folder} && head -c {size} > {target}.part && mv {target}.part {target}"
    return ("sh", "-c", script)


async def deliver(
    api: kube.KubeApi,
    issuer: issuing.TokenIssuer,
    settings: ProviderSettings,
    policy: EgressPolicy,
    *,
    pod: str,
    container: str,
    session_id: str,
    expires_at: int,
) -> None:
    """Issue the session's egress-only token and write its proxy variables into the pod; the token
    is revoked when the write fails.

    Raises:
        AuthProxyError: the token could not be issued.
        KubernetesError: the write failed (the exec's exit code only).
    """
    token_id, token = await issuing.issue_egress_token(issuer, policy, session_id, STEP, expires_at)
    env = step_objects.egress_env(dataclasses.replace(settings, egress=policy), token)
    raw = json.dumps(env).encode()
    try:
        done = await api.exec(settings.namespace, pod, write_command(len(raw)), container=container, stdin=raw)
    except BaseException:
        await pods.shielded(issuing.revoke_step_token(issuer, token_id))
        raise
    if done.exit_code != 0:
        await pods.shielded(issuing.revoke_step_token(issuer, token_id))
        raise errors.KubernetesError(
            f"could not write the egress variables into session pod '{pod}': exit {done.exit_code}", status=500
        )


async def revoke(issuer: issuing.TokenIssuer, session_id: str) -> None:
    """Revoke the session's egress token (every token of its id); a failure is logged: it expires."""
    await issuing.revoke_run_tokens(issuer, session_id)
