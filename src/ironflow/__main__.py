"""``python -m ironflow``: the ``ironflow`` command, where its script is not on ``PATH`` (and what
``python -X importtime -m ironflow …`` measures a command's start-up with)."""

from __future__ import annotations

from ironflow.cli.app import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
