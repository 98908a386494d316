"""SQL migrations of the engine store (PostgreSQL), applied by :mod:`ironflow.migrations`; data only, no code."""

__all__: list[str] = []
