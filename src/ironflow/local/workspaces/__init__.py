"""A workspace on this machine: the private copy a sandbox writes, its bound, its changes, written back."""

__all__: list[str] = []
