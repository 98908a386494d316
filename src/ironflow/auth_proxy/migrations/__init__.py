"""SQL migrations of the auth proxy registry, applied by :mod:`ironflow.migrations`."""

__all__: list[str] = []
