"""The Helm chart ``deploy/helm/ironflow`` as files, generated from the ``ironflow manifests`` renderer (pure).

Nothing in the chart is written by hand. Each template is the renderer's output for a
configuration whose settable names are placeholders (``helmvalue01``, a port of 64999), with
each placeholder then replaced by its ``{{ .Values... }}`` expression; a switch
(``cilium``, ``worker.enabled``...) becomes ``{{- if }}`` / ``{{- else }}`` around the
documents it changes, found by rendering both ways. So ``helm template`` with some values
gives what ``ironflow manifests`` gives with the matching flags, and a unit test regenerates
the chart and compares it with the committed files byte for byte.

What the chart does not expose (use ``ironflow manifests`` for it): installing without the
auth proxy, other presets or egress profiles than the defaults, a profile directory, an
``https`` proxy URL or one outside the cluster, and the agent pods' resources (the provider's
defaults apply). Writing files happens only in :func:`_main`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ironflow.cluster import documents, network, sandbox_router, setup, workloads

__all__ = ["CHART_NAME", "SWITCHES", "VALUES", "Switch", "Value", "chart_files", "default_values", "template_parts"]

CHART_NAME: Final = "ironflow"
_CHART_VERSION: Final = workloads.DEFAULT_WORKER_IMAGE.rpartition(":")[2]


@dataclass(frozen=True)
class Value:
    """A settable name: its path under ``.Values``, its default, and its placeholder in a render."""

    path: str
    default: str | int
    placeholder: str | int
    #: Quote it where it is a whole YAML value (a quantity such as ``"1"`` must stay a string).
    quote: bool = False


@dataclass(frozen=True)
class Switch:
    """An optional part: its path under ``.Values``, its default, and how it sets a configuration."""

    path: str
    default: bool
    apply: Callable[[setup.ClusterSetup, bool], setup.ClusterSetup]


def _resources(prefix: str, base: workloads.Resources, first: int) -> list[Value]:
    defaults = (base.cpu_request, base.memory_request, base.cpu_limit, base.memory_limit)
    pairs = zip(workloads.RESOURCE_KEYS, defaults, strict=True)
    return [
        Value(f"{prefix}.resources.{key}", default, f"helmvalue{first + i:02d}", quote=True)
        for i, (key, default) in enumerate(pairs)
    ]


VALUES: Final[tuple[Value, ...]] = (
    Value("namespaces.agents", setup.AGENTS_NAMESPACE, "helmvalue01"),
    Value("namespaces.worker", setup.WORKER_NAMESPACE, "helmvalue02"),
    Value("workerServiceAccount", setup.WORKER_SERVICE_ACCOUNT, "helmvalue03"),
    Value("authProxy.service", network.AUTH_PROXY_NAME, "helmvalue04"),
    Value("authProxy.namespace", "ironflow-system", "helmvalue05"),
    Value("authProxy.port", 80, 64999),
    Value("authProxy.image", workloads.DEFAULT_AUTH_PROXY_IMAGE, "helmvalue06"),
    Value("authProxy.replicas", 2, 64998),
    *_resources("authProxy", workloads.AUTH_PROXY_RESOURCES, 7),
    Value("worker.image", workloads.DEFAULT_WORKER_IMAGE, "helmvalue11"),
    Value("worker.runnerImage", workloads.DEFAULT_RUNNER_IMAGE, "helmvalue12"),
    *_resources("worker", workloads.WORKER_RESOURCES, 13),
)


_R = dataclasses.replace
SWITCHES: Final[tuple[Switch, ...]] = (
    # A Deployment switched on keeps its settings; off drops them.
    Switch("authProxy.enabled", True, lambda c, on: c if on else _R(c, auth_proxy_deployment=None)),
    Switch("worker.enabled", True, lambda c, on: c if on else _R(c, worker_deployment=None)),
    Switch("cilium", False, lambda c, on: _R(c, cilium=on)),
    Switch("gvisor", False, lambda c, on: _R(c, gvisor=on)),
    Switch("environmentClaims", False, lambda c, on: _R(c, environment_claims=on)),
    Switch("sessionVolumes", False, lambda c, on: _R(c, session_volumes=on)),
    Switch("checkRbac", False, lambda c, on: _R(c, check_rbac=on)),
    Switch("agentSandboxRbac", False, lambda c, on: _R(c, agent_sandbox_rbac=on)),
    Switch("sandboxRouter.enabled", False, lambda c, on: c if on else _R(c, sandbox_router=None)),
)


def _placeholders() -> setup.ClusterSetup:
    """The configuration with every value a placeholder and every switch on."""
    v = {value.path: value.placeholder for value in VALUES}

    def resources(prefix: str) -> workloads.Resources:
        return workloads.Resources(*(str(v[f"{prefix}.resources.{k}"]) for k in workloads.RESOURCE_KEYS))

    return setup.ClusterSetup(
        namespace=str(v["namespaces.agents"]),
        worker_namespace=str(v["namespaces.worker"]),
        worker_service_account=str(v["workerServiceAccount"]),
        auth_proxy_url=f"http://{v['authProxy.service']}.{v['authProxy.namespace']}:{v['authProxy.port']}",
        auth_proxy_deployment=workloads.AuthProxyDeployment(
            image=str(v["authProxy.image"]), replicas=int(v["authProxy.replicas"]), resources=resources("authProxy")
        ),
        worker_deployment=workloads.WorkerDeployment(
            image=str(v["worker.image"]), runner_image=str(v["worker.runnerImage"]), resources=resources("worker")
        ),
        sandbox_router=sandbox_router.SandboxRouterDeployment(image=str(v["worker.image"])),
    )


def template_parts(c: setup.ClusterSetup) -> dict[str, list[documents.Document]]:
    """The template files and their documents; together they are ``setup.render_documents``."""
    return {
        "namespaces.yaml": setup.namespaces(c),
        "worker-rbac.yaml": setup.worker_rbac(c),
        "check-rbac.yaml": setup.check_rbac(c) if c.check_rbac else [],
        "agent-sandbox-rbac.yaml": setup.agent_sandbox_rbac(c) if c.agent_sandbox_rbac else [],
        "network-policies.yaml": setup.network_policies(c),
        "runtimeclass.yaml": setup.runtime_class() if c.gvisor else [],
        "managed-settings.yaml": setup.managed_settings(c),
        "auth-proxy.yaml": setup.workloads_documents(_R(c, worker_deployment=None, sandbox_router=None)),
        "worker.yaml": setup.workloads_documents(_R(c, auth_proxy_deployment=None, sandbox_router=None)),
        "sandbox-router.yaml": setup.workloads_documents(_R(c, auth_proxy_deployment=None, worker_deployment=None)),
    }


def _units(part: str, config: setup.ClusterSetup, switches: Sequence[Switch]) -> list[str]:
    """The part as template units (one document, or one if-block), each switch's if/else around
    only the documents it changes: both ways are rendered, and what they share stays outside."""
    if not switches:
        return [f"---\n{documents.file_text([d])}\n" for d in template_parts(config)[part]]
    first, rest = switches[0], switches[1:]
    on = _units(part, first.apply(config, True), rest)
    off = _units(part, first.apply(config, False), rest)
    if on == off:
        return on
    head = 0
    while head < min(len(on), len(off)) and on[head] == off[head]:
        head += 1
    tail = 0
    while tail < min(len(on), len(off)) - head and on[-1 - tail] == off[-1 - tail]:
        tail += 1
    on_mid, off_mid = on[head : len(on) - tail], off[head : len(off) - tail]
    test = f".Values.{first.path}"
    if on_mid:
        block = f"{{{{- if {test} }}}}\n" + "".join(on_mid)
        block += f"{{{{- else }}}}\n{''.join(off_mid)}" if off_mid else ""
    else:
        block = f"{{{{- if not {test} }}}}\n" + "".join(off_mid)
    return [*on[:head], block + "{{- end }}\n", *on[len(on) - tail :]]


def _substitute(text: str) -> str:
    for value in VALUES:
        expr = f".Values.{value.path}"
        if value.quote:
            text = re.sub(rf"(?m)(?<=: ){value.placeholder}$", f"{{{{ {expr} | quote }}}}", text)
        text = re.sub(rf"\b{value.placeholder}\b", f"{{{{ {expr} }}}}", text)
    return text


def default_values() -> dict[str, Any]:
    """``values.yaml`` as a mapping: every value and switch at its default."""
    tree: dict[str, Any] = {}
    for path, default in [(v.path, v.default) for v in VALUES] + [(s.path, s.default) for s in SWITCHES]:
        *parents, leaf = path.split(".")
        node = tree
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = default
    return tree


_VALUES_COMMENT: Final = """\
Values of the ironflow chart (generated from `ironflow manifests`: see docs/cluster-setup.md).
The defaults render what this prints:
  ironflow manifests --auth-proxy http://ironflow-auth-proxy.ironflow-system \\
    --auth-proxy-deployment --worker-deployment
authProxy.{service,namespace,port} make the proxy's URL http://<service>.<namespace>:<port>.
Resources are Kubernetes quantities; set all four of a workload. Secrets are never values:
create them as the comments above each Deployment say. The default images are the ones
`bash scripts/images build` builds from a checkout, with no registry (docs/cluster-setup.md)."""


def chart_files() -> list[tuple[str, str]]:
    """Every file of the chart, path relative to the chart's root, and its text."""
    config = _placeholders()
    chart = {
        "apiVersion": "v2",
        "name": CHART_NAME,
        "description": "ironflow's cluster install: namespaces, RBAC, network policies, the auth proxy and the worker",
        "type": "application",
        "version": _CHART_VERSION,
        "appVersion": _CHART_VERSION,
    }
    head = documents.Document(chart, "Generated by `python -m ironflow.cluster.helm_chart`: do not edit.")
    files = [
        ("Chart.yaml", documents.file_text([head])),
        ("values.yaml", documents.file_text([documents.Document(default_values(), _VALUES_COMMENT)])),
    ]
    for part in template_parts(config):
        body = _substitute("".join(_units(part, config, SWITCHES)))
        files.append((f"templates/{part}", "# Generated from ironflow.cluster.setup: do not edit.\n" + body))
    return files


def _main(argv: list[str]) -> int:
    """``python -m ironflow.cluster.helm_chart DIR``: (re)write the chart in DIR."""
    if len(argv) != 1:
        print("usage: python -m ironflow.cluster.helm_chart deploy/helm/ironflow", file=sys.stderr)
        return 2
    root = Path(argv[0])
    for path, text in chart_files():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
