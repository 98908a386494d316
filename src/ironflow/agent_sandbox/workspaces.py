"""A git workspace on an agent-sandbox step: its check, its clone in the claimed pod (I/O).

:func:`clone` issues the clone's grant (the
workspace's git host only, a proxied secret: the host's token stays in the proxy), runs
:func:`~ironflow.agent_sandbox.workspace_execs.clone_exec` with the grant's token on stdin,
revokes the grant on every path once the exec ends, and returns the starting commit the
step's report is verified against. The step's own exec and its report are the runner's.
"""

from __future__ import annotations

from ironflow import errors, steps
from ironflow.agent_sandbox import workspace_execs
from ironflow.agent_sandbox.steps import AgentSandboxSettings
from ironflow.auth_proxy import issuing
from ironflow.k8s import manifests as pod_manifests
from ironflow.k8s import pods, step_objects
from ironflow.kube import api as kube

__all__ = ["clone"]


async def clone(
    api: kube.KubeApi,
    s: AgentSandboxSettings,
    issuer: issuing.TokenIssuer | None,
    config: steps.AgentConfig,
    *,
    pod: str,
    run_id: str,
    step: str,
    expires_at: int,
) -> str:
    """Clone the workspace into the claimed ``pod`` and return the starting commit.

    Raises:
        ConfigError: no auth proxy admin client to issue the grant with.
        WorkspaceUnsafe: the clone failed, or printed no starting commit.
        AuthProxyError: the grant could not be issued.
    """
    spec = config.workspace
    secret = step_objects.workspace_secret(s.pod.settings, config)
    if spec is None or secret is None or issuer is None or s.auth_proxy_url is None:
        raise errors.ConfigError("a git workspace needs the auth proxy (auth_proxy(url) and its admin key)")
    token_id, token = await issuing.issue_secret_token(issuer, secret, run_id, step, expires_at)
    try:
        raw = token.reveal().encode()
        argv = workspace_execs.clone_exec(s.auth_proxy_url, spec, len(raw))
        done = await api.exec(s.namespace, pod, argv, container=pod_manifests.CONTAINER_NAME, stdin=raw)
    finally:
        await pods.shielded(issuing.revoke_step_token(issuer, token_id))  # the clone is done: so is its grant
    if done.exit_code != 0:
        # git's own words can quote the URL; only the exit code is said.
        raise errors.WorkspaceUnsafe(f"the workspace's clone failed in sandbox pod '{pod}' (exit {done.exit_code})")
    return workspace_execs.parse_commit(done.stdout)
