"""Entry points only: nothing here is imported by the library.

Each command module exposes ``register(app)``; ``app._register_all`` wires them in. Commands
stay thin over the library: bad input exits 2 with one line on stderr, results go to stdout.
"""

__all__: list[str] = []
