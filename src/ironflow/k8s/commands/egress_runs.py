"""An exec pod's egress (``ironflow exec --backend k8s --allow-host …``): its egress-only token,
issued before the pod and revoked after it (I/O).

The policy rides an egress-only token the provider's auth proxy issues (no credential behind it:
the model and secret relays refuse it); the pod gets it as the password of its ``HTTP(S)_PROXY``
(:func:`ironflow.k8s.step_objects.egress_env`, as an agent step's pod does), an opaque value in
its env that is revoked when the block ends, on every path, cancellation included
(:func:`ironflow.auth_proxy.revoking.held`). The pod is labelled a proxy client
(:meth:`~ironflow.k8s.commands.pod_runs.PodRun.proxy_client`): the rendered NetworkPolicies open
the proxy to those only. A policy that opens nothing issues nothing and leaves the run as it was.
Never logs or raises the token.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator

from ironflow.auth_proxy import admin_client, issuing, revoking
from ironflow.egress import policy as egress_policy
from ironflow.egress import variables
from ironflow.k8s import step_objects
from ironflow.k8s.commands.pod_runs import PodRun
from ironflow.k8s.settings import ProviderSettings

__all__ = ["EXEC_STEP", "check", "with_egress"]

#: The step name of an exec pod's grants (its run is the pod's name).
EXEC_STEP = "exec"


def check(settings: ProviderSettings, policy: egress_policy.EgressPolicy | None) -> None:
    """An opening policy needs the provider's auth proxy, before anything is made.

    Raises:
        StepConfigError: it opens something and the provider has no ``auth_proxy``.
    """
    step_objects.check_egress(dataclasses.replace(settings, egress=policy))


@contextlib.asynccontextmanager
async def with_egress(
    run: PodRun,
    settings: ProviderSettings,
    policy: egress_policy.EgressPolicy | None,
    *,
    now: int,
    issuer: issuing.TokenIssuer | None = None,
) -> AsyncIterator[PodRun]:
    """``run`` with the proxy variables of ``policy``'s egress-only token, revoked when the block
    ends; ``run`` itself for a policy that opens nothing. ``issuer`` defaults to an admin client
    of the provider's auth proxy (closed here).

    Raises:
        StepConfigError: an opening policy on a provider without ``auth_proxy``.
        MissingCredential: no admin key to issue the token with.
        AuthProxyError: the token could not be issued.
    """
    if policy is None or not variables.opens_anything(policy):
        yield run
        return
    check(settings, policy)
    opened = dataclasses.replace(settings, egress=policy)
    proxy = settings.auth_proxy_url
    assert proxy is not None  # check() refuses a provider without one
    expires_at = now + math.ceil(run.settings.timeout_s + run.settings.expiry_margin_s)
    async with (
        admin_client.issuer_for(issuer, proxy, settings.auth_proxy_admin_key) as grants,
        revoking.held(grants) as held,
    ):
        _, token = await held.egress_token(policy, run.name, EXEC_STEP, expires_at)
        run = run.proxy_client()  # the rendered NetworkPolicies open the proxy to agent pods only
        for name, value in step_objects.egress_env(opened, token).items():
            run = run.env(name, value)
        yield run
