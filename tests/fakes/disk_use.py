"""How much a directory holds on disk, the most it held while a test ran (a sampling thread), and the
workspace fill of issue 34's M3 (6 GiB written into a copy bounded at 256 MiB)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Final

__all__ = ["FILL_6_GIB", "FILL_BOUND", "FILL_SLACK", "PeakUse", "small_tree", "used_bytes"]

#: The ``max_total_bytes`` the fill runs against.
FILL_BOUND: Final = 256 << 20
#: 96 files of 64 MiB each: 6 GiB, every file under the 1 GiB per-file limit.
FILL_6_GIB: Final = "i=0; while [ $i -lt 96 ]; do head -c 67108864 /dev/zero > fill$i || exit 3; i=$((i+1)); done"
#: What may pass the bound before the sandbox stops: the writes between two walks and the kill.
FILL_SLACK: Final = 512 << 20


def small_tree(root: Path) -> Path:
    """A one-file source tree under ``root``."""
    source = root / "repo"
    source.mkdir()
    (source / "README.md").write_text("a small tree\n")
    return source


def used_bytes(root: str) -> int:
    """The blocks every file under ``root`` holds, in bytes."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total


class PeakUse:
    """The most ``root`` held on disk (``most``), sampled every 20 ms in a thread while entered."""

    def __init__(self, root: str) -> None:
        self.root, self.most, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.most = max(self.most, used_bytes(self.root))

    def __enter__(self) -> PeakUse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
