"""A step pod's git workspace: the clone and report in its pod, and the push from a pod of its own."""

__all__: list[str] = []
