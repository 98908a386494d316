"""agent-sandbox (kubernetes-sigs/agent-sandbox): typed values, checked manifests, patterns, provider.

Layering: ``models`` (values) and ``schemas`` (shipped CRDs) are pure data; ``manifests``
and ``patterns`` render them (pure); ``provider`` does the I/O through
:mod:`ironflow.k8s.api`. Nothing here imports ``kubernetes_asyncio``.
"""
