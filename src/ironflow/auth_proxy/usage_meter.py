"""Output tokens of one relayed answer, read from the bytes as they pass (pure).

The Messages API reports usage cumulatively: ``message_start`` says ``"output_tokens": 1``,
``message_delta`` the final count; a plain JSON answer carries its usage once. The
meter keeps the largest count seen, and whether it is *final*: a ``message_delta``
passed, or the whole answer did. Until then the handler keeps reading the upstream
(not relaying) for it, so a client that leaves before ``message_delta`` is charged the
stream's own usage, not the ``1`` of ``message_start``.

As a floor, every ``content_block_delta`` event counts one token: an answer whose
upstream never sends ``message_delta`` (cut short, or still silent when the drain
gives up) is still charged at least what was relayed.

>>> meter = UsageMeter()
>>> meter.feed(b'event: message_start\\ndata: {"usage":{"output_tokens":1}}\\n\\n')
>>> meter.feed(b'event: content_block_delta\\ndata: {}\\n\\nevent: content_block_delta\\ndata: {}\\n\\n')
>>> meter.tokens, meter.final
(2, False)
>>> meter.feed(b'event: message_delta\\ndata: {"type":"message_delta","usage":{"output_tokens":500}}\\n\\n')
>>> meter.tokens, meter.final
(500, True)
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["UsageMeter"]

_OUTPUT_TOKENS: Final = re.compile(rb'"output_tokens"\s*:\s*(\d+)')
_DELTA_USAGE: Final = re.compile(rb'"type"\s*:\s*"message_delta".*?"output_tokens"\s*:\s*(\d+)', re.DOTALL)
_BLOCK_DELTA: Final = b"event: content_block_delta"
_OUTPUT_TOKENS_MARK: Final = b'"output_tokens"'
_DELTA_MARK: Final = b'"message_delta"'
#: Bytes of the previous chunk kept so a pattern split across two chunks is still seen;
#: a ``message_delta`` event's JSON fits.
_TAIL: Final = 512


class UsageMeter:
    """Feed it every chunk the upstream sends; read :attr:`tokens` at the end."""

    def __init__(self) -> None:
        self.reported = 0
        self.block_deltas = 0
        self.final = False
        self._tail = b""

    @property
    def tokens(self) -> int:
        """What to charge: the upstream's own count, never less than the deltas relayed."""
        return max(self.reported, self.block_deltas)

    def feed(self, chunk: bytes) -> None:
        """Count one chunk; the regular expressions run only where ``bytes.find`` saw their marker."""
        window = self._tail + chunk if self._tail else chunk
        if _OUTPUT_TOKENS_MARK in window:
            for match in _OUTPUT_TOKENS.finditer(window):
                self.reported = max(self.reported, int(match.group(1)))
            if not self.final and _DELTA_MARK in window and _DELTA_USAGE.search(window):
                self.final = True
        self.block_deltas += window.count(_BLOCK_DELTA) - self._tail.count(_BLOCK_DELTA)
        self._tail = window[-_TAIL:]

    def ended(self) -> None:
        """The upstream sent the whole answer: whatever usage it reported is all there is."""
        self.final = True
